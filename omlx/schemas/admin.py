"""Wire schemas of the web admin's own JSON API (/admin/api/*)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import Struct


class StatsHistory(Struct, kw_only=True):
    """Column-wise samples of the stats snapshot, oldest first (the dashboard's charts)."""

    interval_s: float
    window_s: float
    time: list[float] = msgspec.field(default_factory=list)
    series: dict[str, list[float | None]] = msgspec.field(default_factory=dict)
    models: dict[str, dict[str, list[float | None]]] = msgspec.field(default_factory=dict)


class LogRecord(Struct, kw_only=True):
    seq: int
    time: float
    level: str
    logger: str
    request_id: str = "-"
    message: str


class LogTail(Struct, kw_only=True):
    records: list[LogRecord]
    last_seq: int  # ask for records after this one next
    server_level: str  # the level the server logs at (records below it never exist)


JobState = Literal["running", "done", "failed"]


class JobStatus(Struct, kw_only=True):
    id: str
    kind: str  # import | bench
    title: str
    state: JobState = "running"
    progress: float = 0.0  # 0..1
    message: str = ""
    detail: dict[str, Any] = msgspec.field(default_factory=dict)
    result: Any = None
    error: str | None = None
    started: float
    finished: float | None = None


class SettingRow(Struct, kw_only=True):
    key: str
    section: str
    description: str
    kind: str  # bool | int | float | str | list | dict | choice
    choices: list[str] | None = None
    value: Any = None  # None for a secret (see is_set)
    is_secret: bool = False
    is_set: bool = True  # secrets: whether one is set
    source: str  # default | file | env | cli
    env_var: str
    live: bool  # applied at once; otherwise at the next start
    pending_restart: bool = False  # the file holds a value the running server does not use
    file_value: Any = None  # what config.toml holds now (not for secrets)


class SettingsView(Struct, kw_only=True):
    config_file: str
    rows: list[SettingRow]


class SettingUpdate(Struct, kw_only=True):
    key: str
    value: str  # as `omlx config set KEY VALUE` takes it (lists: JSON or comma-separated)


class PasswordUpdate(Struct, kw_only=True):
    password: str  # empty: remove the admin password


class AdminModel(Struct, kw_only=True):
    """One model as the models page shows it: the store's facts and the pool's state."""

    id: str
    type: str
    state: str  # loaded | loading | available
    pinned: bool = False
    architecture: str | None = None
    num_params: int | None = None
    size_bytes: int | None = None
    quantization: str | None = None
    context_length: int | None = None
    memory_bytes: int = 0
    estimated_bytes: int | None = None
    ttl_s: float | None = None
    ttl_left_s: float | None = None
    in_flight: int = 0
    source: str = "pool"  # local | hf-cache | path | pool
    path: str | None = None
    deletable: bool = False


class AdminModels(Struct, kw_only=True):
    budget_bytes: int
    used_bytes: int
    models: list[AdminModel]
    can_import: bool  # the server was given the store (omlx serve does)


class TtlUpdate(Struct, kw_only=True):
    ttl_s: float | None  # None: back to the default (models.ttl_s)


class ImportRequest(Struct, kw_only=True):
    source: str  # a .gguf path, a model folder, or ORG/NAME on the hub
    name: str | None = None
    dtype: Literal["float32", "float16", "bfloat16", "keep"] = "float32"


class BenchRequest(Struct, kw_only=True):
    model: str
    concurrency: list[int] = msgspec.field(default_factory=lambda: [1, 4])
    prompt_words: list[int] = msgspec.field(default_factory=lambda: [64])
    max_tokens: int = 64
    requests: int = 0  # per level; 0 = 2 x concurrency
    dflash: bool = False


class BenchRun(Struct, kw_only=True):
    id: str
    started: float
    finished: float | None = None
    model: str
    request: BenchRequest
    target: str  # "this server" or the DFlash server it started
    levels: list[dict[str, Any]] = msgspec.field(default_factory=list)
    error: str | None = None


class BenchRunSummary(Struct, kw_only=True):
    id: str
    started: float
    model: str
    levels: int
    dflash: bool
    best_tps: float | None = None

"""One typed settings object: defaults < TOML file < OMLX_* environment < CLI flags."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import tomli_w

KeepAliveMode = Literal["comment", "chunk", "off"]
# engine.prefill_batch_size = 0 (auto): prompts prefilled together per device kind.
DEFAULT_PREFILL_ROWS = 8  # mlx-lm's own default (CPU, Apple silicon)
CUDA_PREFILL_ROWS = 64


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class ServerSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    host: Annotated[str, _doc("Address to bind; loopback unless told otherwise")] = "127.0.0.1"
    port: Annotated[int, _doc("TCP port"), msgspec.Meta(ge=0, le=65535)] = 8000
    api_key: Annotated[str, _doc("Bearer/x-api-key required on /v1 when set")] = ""
    cors_origins: Annotated[
        list[str],
        _doc("Web pages (origins) that may call the API; empty = CORS closed, loopback only"),
    ] = []
    allowed_hosts: Annotated[
        list[str],
        _doc(
            "Host names this server answers besides IP addresses, localhost and this "
            "machine's name (DNS-rebinding guard); '*' turns the check off"
        ),
    ] = []
    keepalive_mode: Annotated[
        KeepAliveMode, _doc("SSE keep-alive while the first token is pending")
    ] = "comment"
    keepalive_interval_s: Annotated[
        float, _doc("Seconds between keep-alive frames"), msgspec.Meta(gt=0)
    ] = 5.0
    max_request_bytes: Annotated[
        int, _doc("Largest request body without images"), msgspec.Meta(gt=0)
    ] = 8 * 1024 * 1024
    max_image_request_bytes: Annotated[
        int,
        _doc("Largest chat request body that carries images (base64 data URLs)"),
        msgspec.Meta(gt=0),
    ] = 64 * 1024 * 1024
    engine_process: Annotated[
        Literal["auto", "on", "off"],
        _doc(
            "Run the models in a child process, the HTTP front end in this one (its "
            "per-token work then does not hold the GIL the engine threads need); "
            "auto = on where MLX computes on a GPU. Off by default: on the H200 it took "
            "the engine's GIL waits away but did not raise throughput measurably"
        ),
    ] = "off"

    def uses_engine_process(self, gpu: bool) -> bool:
        return self.engine_process == "on" or (self.engine_process == "auto" and gpu)


class EngineSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    default_model: Annotated[str, _doc("Model served when a request names none")] = ""
    preload: Annotated[
        bool,
        _doc("Load the default model at start, not at the first request (GET /ready says when)"),
    ] = False
    max_running: Annotated[
        int, _doc("Sequences decoded together per model"), msgspec.Meta(ge=1)
    ] = 32
    max_queued: Annotated[
        int, _doc("Requests waiting per model before 503"), msgspec.Meta(ge=0)
    ] = 256
    prefill_batch_size: Annotated[
        int,
        _doc(
            "Prompts prefilled together; 0 = auto: 8 (mlx-lm's default) on the CPU and on "
            "Apple silicon; on an NVIDIA GPU up to max_running, at most 64 (a wide forward "
            "pass there costs little more than a narrow one)"
        ),
        msgspec.Meta(ge=0),
    ] = 0
    prefill_step_tokens: Annotated[
        int, _doc("Prompt tokens processed per prefill chunk"), msgspec.Meta(ge=16)
    ] = 512
    prefill_share: Annotated[
        float,
        _doc("Share of engine time given to prefill while streams decode (0-1)"),
        msgspec.Meta(gt=0, le=1),
    ] = 0.3
    paced_prompt_tokens: Annotated[
        int,
        _doc(
            "Prompts with more uncached tokens than this are prefilled in paced chunks "
            "(prefill_share) while streams decode; shorter ones join at once"
        ),
        msgspec.Meta(ge=0),
    ] = 256
    default_max_tokens: Annotated[
        int,
        _doc("max_tokens when a request sets none (never more than the context leaves)"),
        msgspec.Meta(ge=1),
    ] = 2048
    freeze_gc: Annotated[
        bool,
        _doc(
            "Hide what a model load leaves alive from Python's garbage collector "
            "(gc.freeze), so that a full collection does not stop decoding for "
            "hundreds of milliseconds; an unload collects once"
        ),
    ] = True
    step_trace: Annotated[
        str,
        _doc("Append per-step engine timings as JSON lines to this file (benchmarks; off: empty)"),
    ] = ""
    max_output_tokens: Annotated[
        int,
        _doc(
            "Largest completion of any request (larger max_tokens are clamped); also the "
            "output limit `omlx launch` writes into agents' configs. 0 = only the context"
        ),
        msgspec.Meta(ge=0),
    ] = 0
    strict_max_tokens: Annotated[
        bool,
        _doc(
            "Refuse (400) a max_tokens larger than the room the prompt leaves in the "
            "context, as OpenAI does; off = clamp it to that room (agents send 32k-64k)"
        ),
    ] = False
    dtype: Annotated[
        Literal["auto", "float32", "float16", "bfloat16"],
        _doc("Import dtype for the default model; auto = float32 on CPU, 4-bit kept on GPU"),
    ] = "auto"
    decode_attention: Annotated[
        Literal["auto", "mlx", "folded", "kernel"],
        _doc(
            "Attention of batched decode steps: mlx (MLX's own; with a padding mask on "
            "CUDA its composed fallback), folded (two plain matmuls, the GQA group folded "
            "into the query rows; experimental, see omlx/mlx_lm_compat/decode_attention.py) "
            "or kernel (NVIDIA GPUs only: one custom CUDA kernel a layer that reads each "
            "key once per GQA group, also for 2-16 queries such as a DFlash verify and its "
            "draft's block, whose rows then match the kernel's one-query steps bit for bit "
            "but not MLX's attention for a lone unmasked query); auto = that kernel "
            "for the batched decode steps and a served DFlash draft's verifies on an "
            "NVIDIA GPU (2.2x MLX's attention, +20-40% HTTP throughput at 128-256 streams "
            "on an H100), mlx elsewhere; see "
            "omlx/mlx_lm_compat/attention_kernel.py"
        ),
    ] = "auto"
    fused_norm_rope: Annotated[
        Literal["off", "on"],
        _doc(
            "NVIDIA GPUs, Qwen3-style attention: each layer's query and key norms and "
            "rotations as one custom CUDA kernel instead of eight graph nodes, for decode "
            "steps bound by the host's work per node; experimental: on an H100 it saved "
            "~0.2 ms of host time a step and no HTTP throughput, see "
            "omlx/mlx_lm_compat/norm_rope_kernel.py"
        ),
    ] = "off"
    fused_projections: Annotated[
        Literal["auto", "off", "on"],
        _doc(
            "Compute each layer's q/k/v and gate/up projections as one matmul each (weights "
            "concatenated at load): fewer kernels and CUDA graph captures per step, for "
            "GPUs whose decode step is bound by the host; auto = on on an NVIDIA GPU only "
            "(no gain measured on a CPU); see omlx/mlx_lm_compat/fused_projections.py"
        ),
    ] = "auto"
    row_gemv: Annotated[
        Literal["auto", "off", "on"],
        _doc(
            "Compute matmuls of 2-16 rows (a few decoding streams, a DFlash verify and "
            "draft) as one batched matrix-vector product, for linears whose weight stays in "
            "the GPU's L2 cache: on CUDA no cuBLASLt graph capture per matmul (SmolLM2's "
            "16-row pass 16-22% faster on an H100), and those rows get the one-row kernel's "
            "numbers, so a DFlash verify matches plain decoding exactly; auto = on on an "
            "NVIDIA GPU for models whose every linear but the head fits (on = any that "
            "fits; slower on a CPU); the attention of 2-16 queries over a short context "
            "(keys and values within 8 MB a layer) follows, also for a 4-bit model; see "
            "omlx/mlx_lm_compat/row_gemv.py and row_attention.py"
        ),
    ] = "auto"

    cpu_prefill_attention: Annotated[
        Literal["auto", "off"],
        _doc(
            "On a CPU, the softmax of prefill chunks (64 queries or more) in numpy, whose "
            "exponential is vectorised where MLX's is not on x86: a 2,646-token prompt's "
            "first token 1.52x sooner on 2 cores (SmolLM2); auto = on a CPU; decode steps "
            "keep MLX's attention. Embedding and reranking encoders (omlx's BERT) take it "
            "too, with GELU's erf as a rational function; see "
            "omlx/mlx_lm_compat/cpu_prefill_attention.py and omlx/workers/bert_cpu.py"
        ),
    ] = "auto"
    cpu_float32: Annotated[
        Literal["auto", "off", "on"],
        _doc(
            "On a CPU, cast a model's float16/bfloat16 parameters (a quantized model's "
            "scales and biases) to float32 at load, for every model type: MLX's CPU "
            "kernels for half precision are 2-30x slower (SmolLM2 in bfloat16: 140 -> 65 ms "
            "a token). auto = when the model then takes at most a quarter of the RAM; with "
            "either value a quantized model whose float32 form fits that share is also "
            "dequantized (its CPU kernels are slower than float32 ones); see "
            "omlx/platform/cpu_precision.py"
        ),
    ] = "auto"

    def fuses_projections(self, cuda: bool) -> bool:
        """fused_projections with auto resolved for the device."""
        return self.fused_projections == "on" or (self.fused_projections == "auto" and cuda)

    def attention_mode(self, cuda: bool) -> Literal["mlx", "folded", "decode_kernel", "kernel"]:
        """decode_attention resolved for the device: the kernel only on CUDA, and under
        auto only for batched one-query steps."""
        if self.decode_attention == "auto":
            return "decode_kernel" if cuda else "mlx"
        if self.decode_attention == "kernel" and not cuda:
            return "mlx"
        return self.decode_attention

    def row_gemv_mode(self, cuda: bool) -> Literal["off", "small_models", "on"]:
        """row_gemv with auto resolved for the device: "small_models" swaps a model's
        linears only when every one of them fits."""
        if self.row_gemv == "auto":
            return "small_models" if cuda else "off"
        return self.row_gemv

    def prefill_rows(self, cuda: bool) -> int:
        """prefill_batch_size with auto (0) resolved for the device."""
        if self.prefill_batch_size:
            return self.prefill_batch_size
        return min(self.max_running, CUDA_PREFILL_ROWS) if cuda else DEFAULT_PREFILL_ROWS


class ModelSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    dirs: Annotated[list[str], _doc("Extra model directories to scan")] = []
    scan_hf_cache: Annotated[bool, _doc("Also scan the Hugging Face hub cache")] = True
    pinned: Annotated[list[str], _doc("Models never unloaded automatically")] = []
    memory_budget: Annotated[
        str, _doc("Pool memory budget: bytes (e.g. 8GB) or a fraction of RAM (e.g. 0.75)")
    ] = "0.75"
    ttl_s: Annotated[
        float, _doc("Unload a model idle this long (0 = never)"), msgspec.Meta(ge=0)
    ] = 0.0
    ttl_overrides_s: Annotated[
        dict[str, float], _doc("Per-model idle TTL in seconds, overriding ttl_s")
    ] = {}
    image_max_bytes: Annotated[
        int, _doc("Largest image a VLM request may send or link"), msgspec.Meta(gt=0)
    ] = 20 * 1024 * 1024
    image_fetch_timeout_s: Annotated[
        float, _doc("Timeout for fetching an http(s) image URL"), msgspec.Meta(gt=0)
    ] = 10.0
    allow_paths: Annotated[
        bool,
        _doc(
            "Let requests name a model folder by path, not only models in the store and "
            "models.dirs (trusted clients only)"
        ),
    ] = False
    image_local_paths: Annotated[
        bool, _doc("Let VLM requests name local image files (trusted clients only)")
    ] = False


class CacheSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    enabled: Annotated[bool, _doc("Tiered block KV cache on/off")] = True
    block_size: Annotated[int, _doc("Tokens per cache block"), msgspec.Meta(ge=1)] = 256
    partial_blocks: Annotated[
        bool | Literal["auto"],
        _doc(
            "Reuse shared tokens below one block too (prompts that diverge inside a block "
            "or end before one fills); RAM only, full-attention models only. auto = off on "
            "an NVIDIA GPU only: there, recomputing under a block of tokens in a batched "
            "prefill costs less than copying them back from RAM for each request"
        ),
    ] = "auto"
    store_while_busy: Annotated[
        bool | Literal["auto"],
        _doc(
            "Store a finished sequence's KV as soon as it ends, even while other requests "
            "decode (the copy to RAM runs on the engine thread). Off: stores wait until the "
            "engine is idle, the newest first; past 16 waiting (or 1 GiB of their KV) the "
            "oldest are dropped "
            "(a cancelled request's KV is always stored at once). auto = off on an NVIDIA "
            "GPU only, where the copy out of GPU memory cost ~54 ms per 8B-shape sequence"
        ),
    ] = "auto"
    hot_budget_bytes: Annotated[
        int, _doc("RAM hot tier budget shared by all models"), msgspec.Meta(ge=0)
    ] = 2 * 1024**3
    cold_dir: Annotated[str, _doc("SSD cold tier directory (default $OMLX_HOME/cache)")] = ""
    cold_cap_bytes: Annotated[
        int, _doc("Cold tier size cap; 0 = 10% of free disk at start-up"), msgspec.Meta(ge=0)
    ] = 0

    def reuse_partial_blocks(self, cuda: bool) -> bool:
        """partial_blocks with auto resolved for the device."""
        return _off_on_cuda(self.partial_blocks, cuda)

    def stores_while_busy(self, cuda: bool) -> bool:
        """store_while_busy with auto resolved for the device."""
        return _off_on_cuda(self.store_while_busy, cuda)


def _off_on_cuda(value: bool | Literal["auto"], cuda: bool) -> bool:
    """A switch whose auto value means on, except on an NVIDIA GPU."""
    return not cuda if value == "auto" else bool(value)


class DraftSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    model: Annotated[str, _doc("Model served with a DFlash draft")] = ""
    path: Annotated[str, _doc("DFlash draft checkpoint folder")] = ""
    block_size: Annotated[
        int,
        _doc(
            "DFlash draft block size; 0 = auto: the draft's own on a GPU, at most 4 on a CPU "
            "(a CPU verify costs more the wider it is)"
        ),
        msgspec.Meta(ge=0),
    ] = 0
    max_context_tokens: Annotated[
        int, _doc("Longer prompts use the normal batched path"), msgspec.Meta(ge=1)
    ] = 8192


class AgentSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    model_aliases: Annotated[
        dict[str, str],
        _doc(
            "Client model names → local models; a key also matches names containing it "
            '(e.g. {"sonnet": "qwen3-8b"} serves claude-sonnet-4-5)'
        ),
    ] = {}
    claude_fallback: Annotated[
        bool,
        _doc(
            "Anthropic API: a claude-* or opus/sonnet/haiku name that is neither a model nor "
            "an alias is served by the default model (Claude Code sends such names); "
            "false = 404"
        ),
    ] = True
    context_window_tokens: Annotated[
        int,
        _doc(
            "Anthropic API: scale reported token counts to this context window "
            "(e.g. 200000 for Claude Code's auto-compaction); 0 = report real counts"
        ),
        msgspec.Meta(ge=0),
    ] = 0
    max_stored_responses: Annotated[
        int, _doc("Responses API: responses kept for previous_response_id"), msgspec.Meta(ge=0)
    ] = 256


class LogSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], _doc("Log level")] = "INFO"


class AdminSettings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    password_hash: Annotated[
        str,
        _doc(
            "scrypt hash of a password for the web admin's login (set it on the admin's "
            "settings page); the API key is accepted too"
        ),
        msgspec.Meta(pattern=r"^(scrypt\$[0-9]+\$[0-9]+\$[0-9]+\$[^$]+\$[^$]+)?$"),
    ] = ""
    session_idle_s: Annotated[
        float,
        _doc("Web admin sessions end after this many seconds without a request"),
        msgspec.Meta(gt=0),
    ] = 1800.0


class Settings(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    server: ServerSettings = msgspec.field(default_factory=ServerSettings)
    engine: EngineSettings = msgspec.field(default_factory=EngineSettings)
    models: ModelSettings = msgspec.field(default_factory=ModelSettings)
    cache: CacheSettings = msgspec.field(default_factory=CacheSettings)
    draft: DraftSettings = msgspec.field(default_factory=DraftSettings)
    log: LogSettings = msgspec.field(default_factory=LogSettings)
    agents: AgentSettings = msgspec.field(default_factory=AgentSettings)
    admin: AdminSettings = msgspec.field(default_factory=AdminSettings)


SECTIONS: dict[str, type[msgspec.Struct]] = {
    "server": ServerSettings,
    "engine": EngineSettings,
    "models": ModelSettings,
    "cache": CacheSettings,
    "draft": DraftSettings,
    "log": LogSettings,
    "agents": AgentSettings,
    "admin": AdminSettings,
}

# Never shown back (config show, the admin's settings page): only whether one is set.
SECRET_KEYS = frozenset({"server.api_key", "admin.password_hash"})

Source = Literal["default", "file", "env", "cli"]


class SettingsError(ValueError):
    """A settings key or value that cannot be accepted."""


def omlx_home() -> Path:
    return Path(os.environ.get("OMLX_HOME") or Path.home() / ".omlx").expanduser()


def config_path() -> Path:
    return Path(os.environ.get("OMLX_CONFIG") or omlx_home() / "config.toml")


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, resolved as huggingface_hub does but at call time.

    huggingface_hub reads these variables once at import; the store re-reads them so a
    changed HF_HOME (tests, long-lived processes) is honoured.
    """
    env = os.environ
    if env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env.get("HF_HUB_CACHE") or env["HUGGINGFACE_HUB_CACHE"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(env.get("HF_HOME") or Path(xdg) / "huggingface").expanduser() / "hub"


def env_var(key: str) -> str:
    section, name = key.split(".", 1)
    return f"OMLX_{section.upper()}__{name.upper()}"


def all_keys() -> list[str]:
    return [f"{s}.{f}" for s, cls in SECTIONS.items() for f in cls.__struct_fields__]


def field_type(key: str) -> Any:
    section, name = _split_key(key)
    return msgspec.structs.fields(SECTIONS[section])[
        SECTIONS[section].__struct_fields__.index(name)
    ].type


def description(key: str) -> str:
    section, name = _split_key(key)
    for f in msgspec.inspect.type_info(SECTIONS[section]).fields:  # type: ignore[attr-defined]
        if f.name == name:
            t = f.type
            while isinstance(t, msgspec.inspect.Metadata):
                if t.extra_json_schema and "description" in t.extra_json_schema:
                    return t.extra_json_schema["description"]
                t = t.type
    return ""


def _split_key(key: str) -> tuple[str, str]:
    if "." not in key:
        raise SettingsError(f"unknown setting {key!r}: use SECTION.FIELD, one of {all_keys()}")
    section, name = key.split(".", 1)
    if section not in SECTIONS or name not in SECTIONS[section].__struct_fields__:
        raise SettingsError(f"unknown setting {key!r}; known settings: {', '.join(all_keys())}")
    return section, name


def parse_value(key: str, raw: str) -> Any:
    """Turn a string from the environment or the command line into a typed value."""
    t = field_type(key)
    try:
        as_json = msgspec.json.decode(raw.encode())
    except msgspec.DecodeError:
        as_json = None
    for candidate in (as_json, raw) if as_json is not None else (raw,):
        try:
            return msgspec.convert(candidate, t, strict=False)
        except msgspec.ValidationError:
            continue
    if _is_list(t):
        items = [x.strip() for x in raw.split(",") if x.strip()]
        try:
            return msgspec.convert(items, t, strict=False)
        except msgspec.ValidationError as e:
            raise SettingsError(f"bad value for {key}: {e}") from None
    try:
        msgspec.convert(raw, t, strict=False)
    except msgspec.ValidationError as e:
        raise SettingsError(f"bad value {raw!r} for {key}: {e}") from None
    raise SettingsError(f"bad value {raw!r} for {key}")


def _is_list(t: Any) -> bool:
    return "list[" in str(t)


@dataclass(slots=True)
class LoadedSettings:
    settings: Settings
    sources: dict[str, Source] = field(default_factory=dict)
    path: Path | None = None

    def value(self, key: str) -> Any:
        section, name = _split_key(key)
        return getattr(getattr(self.settings, section), name)


def read_file(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: not valid TOML: {e}") from None
    for section, values in data.items():
        if section not in SECTIONS or not isinstance(values, dict):
            raise SettingsError(f"{path}: unknown section [{section}]")
        for name in values:
            try:
                _split_key(f"{section}.{name}")
            except SettingsError as e:
                raise SettingsError(f"{path}: {e}") from None
    return data


def load_settings(cli: dict[str, Any] | None = None, path: Path | None = None) -> LoadedSettings:
    """Merge defaults, the TOML file, OMLX_* variables and CLI flags; validate once."""
    path = path or config_path()
    merged: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    sources: dict[str, Source] = dict.fromkeys(all_keys(), "default")
    for section, values in read_file(path).items():
        for name, v in values.items():
            merged[section][name] = v
            sources[f"{section}.{name}"] = "file"
    for key in all_keys():
        raw = os.environ.get(env_var(key))
        if raw is not None:
            section, name = key.split(".", 1)
            try:
                merged[section][name] = parse_value(key, raw)
            except SettingsError as e:
                raise SettingsError(f"{env_var(key)}: {e}") from None
            sources[key] = "env"
    for key, v in (cli or {}).items():
        if v is None:
            continue
        section, name = _split_key(key)
        merged[section][name] = v
        sources[key] = "cli"
    try:
        settings = msgspec.convert(merged, Settings, strict=False)
    except msgspec.ValidationError as e:
        raise SettingsError(f"invalid settings: {e}{_origin(str(e), sources, path)}") from None
    return LoadedSettings(settings=settings, sources=sources, path=path)


def _origin(error: str, sources: dict[str, Source], path: Path) -> str:
    """Where the value named in a msgspec error (`... at `$.server.port``) came from."""
    match = re.search(r"at `\$\.(\w+)\.(\w+)", error)
    key = f"{match[1]}.{match[2]}" if match else ""
    where = {"file": str(path), "env": env_var(key) if key else "", "cli": "command line"}
    source = sources.get(key)
    return f" (setting {key}, from {where[source]})" if source in where else ""


def set_value(key: str, raw: str, path: Path | None = None) -> Any:
    """Validate and write one key to the TOML file; returns the typed value."""
    path = path or config_path()
    section, name = _split_key(key)
    value = parse_value(key, raw)
    data = read_file(path)
    data.setdefault(section, {})[name] = value
    try:
        msgspec.convert(data, Settings, strict=False)
    except msgspec.ValidationError as e:
        raise SettingsError(f"bad value {raw!r} for {key}: {e}") from None
    write_file(path, data)
    return value


def update_list(key: str, item: str, add: bool, path: Path | None = None) -> list[str]:
    """Add or remove one item of a list setting in the file (used by pin/unpin)."""
    path = path or config_path()
    section, name = _split_key(key)
    data = read_file(path)
    current = list(data.get(section, {}).get(name, []))
    if add and item not in current:
        current.append(item)
    if not add:
        current = [x for x in current if x != item]
    data.setdefault(section, {})[name] = current
    write_file(path, data)
    return current


def write_file(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(tomli_w.dumps(data))
    os.replace(tmp, path)


def flatten(settings: Settings) -> dict[str, Any]:
    return {
        f"{s}.{f}": getattr(getattr(settings, s), f)
        for s, cls in SECTIONS.items()
        for f in cls.__struct_fields__
    }

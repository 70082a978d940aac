"""A model folder's sampling defaults, from its generation_config.json (pure Python).

Model authors put the sampling they tuned for there (`temperature`, `top_p`, ...); a
request that sets none of these gets them instead of the API's neutral defaults, which
for a small model (temperature 1.0) read as nonsense. As in vLLM, only these keys count:
`do_sample` is not read, since many files carry `do_sample: false` beside values meant
for sampling.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GENERATION_CONFIG = "generation_config.json"

# key -> (type, is the value acceptable)
SAMPLING_KEYS: dict[str, tuple[type, Any]] = {
    "temperature": (float, lambda v: v >= 0),
    "top_p": (float, lambda v: 0 < v <= 1),
    "top_k": (int, lambda v: v >= 0),
    "min_p": (float, lambda v: 0 <= v <= 1),
    "repetition_penalty": (float, lambda v: v > 0),
}


def read_generation_config(path: Path) -> dict[str, Any]:
    """The folder's generation_config.json as a dict ({} when absent or unreadable)."""
    f = Path(path) / GENERATION_CONFIG
    if not f.is_file():
        return {}
    try:
        data = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        log.warning("ignoring %s: %s", f, e)
        return {}
    return data if isinstance(data, dict) else {}


def sampling_defaults(path: Path) -> dict[str, float | int]:
    """The sampling keys of the folder's generation_config.json that hold usable values."""
    return sampling_defaults_from(read_generation_config(path), source=str(path))


def sampling_defaults_from(config: dict[str, Any], source: str = "") -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for key, (kind, ok) in SAMPLING_KEYS.items():
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            log.warning("%s: ignoring %s=%r (not a number)", source, key, value)
            continue
        if kind is int and value != int(value):
            log.warning("%s: ignoring %s=%r (not an integer)", source, key, value)
            continue
        typed = int(value) if kind is int else float(value)
        if not math.isfinite(typed) or not ok(typed):
            log.warning("%s: ignoring %s=%r (out of range)", source, key, value)
            continue
        out[key] = typed
    return out


def add_sampling_defaults(path: Path, preset: dict[str, float | int]) -> bool:
    """Write the preset's keys the folder's generation_config.json does not set yet.

    Keys already there win (the model author's or the user's). Returns whether it wrote.
    """
    f = Path(path) / GENERATION_CONFIG
    config = read_generation_config(path)
    if f.is_file() and not config:
        return False  # unreadable: leave it to whoever wrote it
    missing = {k: v for k, v in preset.items() if k not in config}
    if not missing:
        return False
    f.write_text(json.dumps({**config, **missing}, indent=2))
    return True

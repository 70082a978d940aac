"""Model fingerprint: changes whenever the weights, the dtype or the quantization change."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".npz", ".bin")
_CONFIG_FILES = ("config.json",)


def model_fingerprint(
    model_dir: Path | str,
    *,
    dtype: str = "",
    quantization: dict | None = None,
    extra: str = "",
) -> str:
    """Hash of the weight files' names, sizes and mtimes, the config, dtype and quantization.

    Cheap (stat calls only, no weight bytes read). `dtype` is the dtype the engine loads
    into (a float32 import of a bf16 checkpoint gives other KV); `quantization` defaults to
    the config's; `extra` takes anything else that changes the KV (adapters, a GGUF import
    recipe version).
    """
    root = Path(model_dir)
    h = hashlib.blake2b(digest_size=16, person=b"omlx-model-fp")
    files = sorted(
        p for p in root.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES)
    ) if root.is_dir() else [root]  # fmt: skip
    for p in files:
        st = p.stat()
        h.update(f"{p.name}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    config: dict = {}
    for name in _CONFIG_FILES:
        path = root / name
        if path.is_file():
            h.update(path.read_bytes())
            try:
                config = json.loads(path.read_text())
            except ValueError:
                config = {}
    if quantization is None:
        quantization = config.get("quantization") or config.get("quantization_config") or {}
    h.update(f"dtype={dtype}|".encode())
    h.update(json.dumps(quantization, sort_keys=True, default=str).encode())
    h.update(f"|{extra}".encode())
    return h.hexdigest()

"""Optional parts of omlx: the Python packages some model types need beyond a text server.

mlx-vlm (vision-language and OCR models) pulls in about 700 MB (opencv, pyarrow, pandas,
scipy, audio libraries) that serving text never imports, so it is the `vlm` extra;
mlx-embeddings (embedding models other than BERT) depends on mlx-vlm and is the
`embeddings` extra. Checked without importing them (they import MLX), so the asyncio
side can ask before it fetches images or loads anything.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

from omlx.errors import MissingExtra


@dataclass(frozen=True, slots=True)
class Extra:
    name: str  # pip install 'omlx[name]'
    module: str
    what: str


VLM = Extra("vlm", "mlx_vlm", "vision-language and OCR models need mlx-vlm")
EMBEDDINGS = Extra(
    "embeddings", "mlx_embeddings", "embedding models other than BERT need mlx-embeddings"
)


def is_installed(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is not None  # None: import blocked
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(extra: Extra, model: str) -> None:
    """Raise MissingExtra, naming the pip command, unless `extra` is installed."""
    if not is_installed(extra.module):
        raise MissingExtra(
            f"model {model!r} cannot be served by this install: {extra.what}, an optional "
            f"part of omlx. Install it with: pip install 'omlx[{extra.name}]' "
            f"(from a checkout: pip install -e '.[{extra.name}]')"
        )

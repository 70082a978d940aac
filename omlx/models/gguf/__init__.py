"""GGUF import: convert llama.cpp model files into MLX model folders mlx-lm loads."""

from __future__ import annotations

from .importer import import_gguf

__all__ = ["import_gguf"]

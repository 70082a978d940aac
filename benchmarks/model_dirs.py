"""The model folders benchmarks run on: the default model, or a tiny random one (--smoke)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def default_model_dir() -> Path:
    """The default model's folder, imported from its offline package on first use."""
    from omlx.models.default_model import ensure_default_model
    from omlx.settings import omlx_home

    return ensure_default_model(omlx_home() / "models")


def tiny_model_dir(arch: str = "llama") -> Path:
    """A seeded random tiny `arch` model with a tokenizer, in a fresh temporary folder."""
    sys.path.insert(0, str(Path(__file__).parents[1]))  # the repo's tests package
    from tests.fixtures.tiny_models import build_tiny_model

    return build_tiny_model(arch, Path(tempfile.mkdtemp(prefix="omlx-bench-")) / "tiny")

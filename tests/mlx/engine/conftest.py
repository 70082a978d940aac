"""Fixtures of the engine tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from omlx.mlx_lm_compat.row_attention import restore_all_row_attention


@pytest.fixture
def tiny_dir(tiny_llama_dir: Path) -> Path:
    return tiny_llama_dir


@pytest.fixture(autouse=True)
def _no_row_attention_left():
    """use_row_gemv patches attention process-wide (every model of the architecture): a
    test that chose it must not hand it to the next test of the same worker."""
    yield
    restore_all_row_attention()

"""Fixtures of the engine tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def tiny_dir(tiny_llama_dir: Path) -> Path:
    return tiny_llama_dir

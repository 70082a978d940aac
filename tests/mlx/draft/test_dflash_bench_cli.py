"""`omlx dflash-bench` on tiny checkpoints written to disk (real loader and tokenizer)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from omlx.cli.main import app
from omlx.draft.random_init import draft_config_for, random_draft, save_draft


@pytest.mark.parametrize("fixture", ["tiny_qwen3_dir", "tiny_hybrid_dir"])
def test_json_report_with_a_saved_draft(request, tmp_path, fixture):
    from mlx_lm import load

    model_dir = request.getfixturevalue(fixture)
    target, _ = load(str(model_dir))
    draft_dir = save_draft(random_draft(draft_config_for(target)), tmp_path / "draft")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello there\n\nwhat is two plus two?\n")
    result = CliRunner().invoke(
        app,
        [
            "dflash-bench",
            "--model", str(model_dir),
            "--draft", str(draft_dir),
            "--prompts", str(prompts),
            "--max-tokens", "12",
            "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["identical"] is True
    assert 1.0 <= report["acceptance_length"] <= 16.0
    assert report["speedup"] > 0
    assert report["num_prompts"] == 2


def test_random_draft_and_text_summary(tiny_llama_dir):
    result = CliRunner().invoke(
        app,
        ["dflash-bench", "--model", str(tiny_llama_dir), "--draft", "random", "--max-tokens", "8"],
    )
    assert result.exit_code == 0, result.output
    assert "identical greedy output: True" in result.output
    assert "speedup" in result.output


def test_bad_draft_folder_is_a_clean_error(tiny_llama_dir, tmp_path):
    result = CliRunner().invoke(
        app, ["dflash-bench", "--model", str(tiny_llama_dir), "--draft", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "no DFlash draft config" in result.output

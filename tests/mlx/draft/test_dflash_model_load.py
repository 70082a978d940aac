"""Draft checkpoints load by their published names and are checked against the target."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from omlx.draft.loop import DFlashGenerator
from omlx.draft.model import load_draft
from omlx.draft.random_init import draft_config_for, random_draft, save_draft
from omlx.errors import DraftMismatch, InvalidRequest
from tests.mlx.draft.conftest import build_target

PUBLISHED_NAMES = {
    "fc.weight",
    "hidden_norm.weight",
    "norm.weight",
    *(
        f"layers.{i}.{name}.weight"
        for i in range(2)
        for name in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "self_attn.q_norm",
            "self_attn.k_norm",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
            "input_layernorm",
            "post_attention_layernorm",
        )
    ),
}


def test_save_and_load_round_trip(tmp_path):
    target = build_target("qwen3")
    draft = random_draft(draft_config_for(target), seed=2)
    folder = save_draft(draft, tmp_path / "draft")
    raw = json.loads((folder / "config.json").read_text())
    assert raw["dflash_config"]["target_layer_ids"] == list(draft.config.target_layer_ids)
    assert set(mx.load(str(folder / "model.safetensors"))) == PUBLISHED_NAMES

    loaded = load_draft(folder)
    assert loaded.config == draft.config
    for (name, a), (_, b) in zip(
        tree_flatten(draft.parameters()), tree_flatten(loaded.parameters()), strict=True
    ):
        np.testing.assert_array_equal(np.array(a), np.array(b), err_msg=name)
    DFlashGenerator.from_models(target, loaded)  # fits its target


def test_block_size_inside_dflash_config(tmp_path):
    target = build_target("qwen3")
    folder = save_draft(random_draft(draft_config_for(target)), tmp_path / "d")
    raw = json.loads((folder / "config.json").read_text())
    del raw["block_size"]
    raw["dflash_config"]["block_size"] = 8
    (folder / "config.json").write_text(json.dumps(raw))
    assert load_draft(folder).config.block_size == 8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"hidden_size": 128}, "hidden size"),
        ({"vocab_size": 300}, "vocabulary"),
        ({"num_hidden_layers": 6}, "target layers"),
    ],
)
def test_mismatched_target_is_a_clear_error(overrides, message):
    draft = random_draft(draft_config_for(build_target("qwen3")))
    other = build_target("qwen3", **overrides)
    with pytest.raises(DraftMismatch, match=message):
        DFlashGenerator.from_models(other, draft)


def test_layer_ids_outside_target(tmp_path):
    target = build_target("llama")
    draft = random_draft(draft_config_for(target, layer_ids=(1, 9)))
    with pytest.raises(DraftMismatch, match=r"layer ids \[9\]"):
        DFlashGenerator.from_models(target, draft)


def test_bad_checkpoint_folders(tmp_path):
    with pytest.raises(InvalidRequest, match="no DFlash draft config"):
        load_draft(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(InvalidRequest, match="not a DFlash draft"):
        load_draft(tmp_path)
    target = build_target("qwen3")
    folder = save_draft(random_draft(draft_config_for(target)), tmp_path / "d")
    weights = mx.load(str(folder / "model.safetensors"))
    del weights["fc.weight"]
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    with pytest.raises(InvalidRequest, match="do not match"):
        load_draft(folder)

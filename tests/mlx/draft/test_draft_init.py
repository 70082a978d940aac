"""`--init-from-target`: the draft starts from the target's last layers and final norm."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omlx.draft.train.data import Sample
from omlx.draft.train.init_from_target import dense_weight
from omlx.draft.train.sizing import draft_config
from omlx.draft.train.trainer import TrainConfig, Trainer
from tests.mlx.draft.conftest import build_target

PARTS = ("self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj")


def _samples() -> list[Sample]:
    rng = np.random.default_rng(0)
    return [
        Sample(f"p{i}", "test", "train", True, tuple(range(3, 9)), tuple(rng.integers(1, 60, 12)))
        for i in range(4)
    ]


def _trainer(target, tmp_path, init: bool, **shape) -> Trainer:
    cfg = TrainConfig(steps=1, batch_size=2, anchors_per_seq=2, init_from_target=init)
    samples = _samples()
    config = draft_config(target, block_size=4, rope_from_target=init, **shape)
    return Trainer(target, config, samples, samples[:2], cfg, tmp_path / f"d{init}")


def _get(module, path: str):
    for part in path.split("."):
        module = getattr(module, part)
    return module


def _equal(a: mx.array, b: mx.array) -> bool:
    return bool(mx.array_equal(a, b).item())


def test_draft_layers_start_as_the_targets_last_layers(tmp_path) -> None:
    target = build_target("qwen3", num_hidden_layers=4)
    random_start = _trainer(target, tmp_path, init=False, num_layers=2).draft
    draft = _trainer(target, tmp_path, init=True, num_layers=2).draft
    for i, layer in enumerate(draft.layers):
        source = target.model.layers[2 + i]  # the last two of four
        for path in (*PARTS, "input_layernorm", "post_attention_layernorm"):
            assert _equal(_get(layer, path).weight, _get(source, path).weight), (i, path)
        # The draft's own parts stay as a random start makes them (same seed).
        assert _equal(layer.self_attn.q_norm.weight, random_start.layers[i].self_attn.q_norm.weight)
    assert _equal(draft.norm.weight, target.model.norm.weight)
    assert _equal(draft.fc.weight, random_start.fc.weight)
    assert not _equal(draft.layers[0].mlp.up_proj.weight, random_start.layers[0].mlp.up_proj.weight)
    assert draft.config.rope_theta == target.args.rope_theta


def test_quantized_targets_are_copied_dequantized(tmp_path) -> None:
    target = build_target("llama", num_hidden_layers=2)
    nn.quantize(target, group_size=32, bits=8)
    q_proj = target.model.layers[1].self_attn.q_proj
    assert isinstance(q_proj, nn.QuantizedLinear)
    draft = _trainer(target, tmp_path, init=True, num_layers=1).draft
    expected = dense_weight(q_proj)
    assert expected is not None and expected.shape == draft.layers[0].self_attn.q_proj.weight.shape
    assert _equal(draft.layers[0].self_attn.q_proj.weight, expected)


def test_parts_of_another_shape_stay_random(tmp_path) -> None:
    target = build_target("qwen3", num_hidden_layers=2)
    random_start = _trainer(target, tmp_path, init=False, num_layers=1, intermediate_size=40)
    draft = _trainer(target, tmp_path, init=True, num_layers=1, intermediate_size=40).draft
    layer, source = draft.layers[0], target.model.layers[1]
    assert _equal(layer.self_attn.k_proj.weight, source.self_attn.k_proj.weight)
    assert _equal(layer.mlp.gate_proj.weight, random_start.draft.layers[0].mlp.gate_proj.weight)


def test_a_draft_deeper_than_the_target_takes_what_there_is(tmp_path) -> None:
    target = build_target("qwen3", num_hidden_layers=2)
    draft = _trainer(target, tmp_path, init=True, num_layers=3).draft
    for i, source in enumerate(target.model.layers):  # draft layers 1, 2 <- target 0, 1
        assert _equal(draft.layers[1 + i].mlp.up_proj.weight, source.mlp.up_proj.weight)

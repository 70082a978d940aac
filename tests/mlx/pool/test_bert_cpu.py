"""omlx's BERT on a CPU (omlx/workers/bert_cpu.py): numpy's softmax and a rational erf give
the encoder's outputs, and the loaders and the pool take them as engine.cpu_prefill_attention
says."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from omlx.mlx_lm_compat import cpu_prefill_attention as cpa
from omlx.pool import handles
from omlx.workers import bert_cpu
from omlx.workers.embeddings import embed, load_bert, load_embedding_model
from omlx.workers.rerank import load_reranker, rerank

ON_CPU = mx.default_device().type == mx.DeviceType.cpu


def test_the_rational_erf_is_erf_to_float32_rounding():
    grid = np.linspace(-6.0, 6.0, 24001)
    exact = np.array([math.erf(u) for u in grid])
    ours = np.array(bert_cpu.erf_rational(mx.array(grid, mx.float32)))
    mlx_own = np.array(mx.erf(mx.array(grid, mx.float32)))
    assert np.abs(ours - exact).max() < 6e-7
    assert np.abs(ours - exact).max() < 4 * np.abs(mlx_own - exact).max() + 1e-7
    # the fit bites: one coefficient off by 1% is far outside that
    z = grid.clip(-4, 4) ** 2
    p = np.polyval(np.array(bert_cpu.ERF_P[::-1]) * [1, 1, 1.01, 1, 1, 1], z)
    off = grid.clip(-4, 4) * p / np.polyval(np.array(bert_cpu.ERF_Q[::-1]), z)
    assert np.abs(off - exact).max() > 1e-4


def test_the_rational_gelu_is_mlx_gelu():
    x = mx.concatenate([mx.linspace(-12, 12, 5001), mx.array([-1e4, -100.0, 100.0, 1e4])])
    ours, ref = bert_cpu.gelu_rational(x), nn.gelu(x)
    assert mx.allclose(ours, ref, rtol=2e-6, atol=2e-6).item()
    assert ours.dtype == ref.dtype == mx.float32
    half = x.astype(mx.bfloat16)
    ours_half = bert_cpu.gelu_rational(half)
    assert ours_half.dtype == mx.bfloat16
    # computed in float32 and rounded once: MLX's float32 GELU of the same inputs, rounded,
    # but where the two float32 values straddle a rounding boundary (MLX's own bfloat16
    # GELU, computed in bfloat16, matches it in ~78% of these points)
    ref_half = nn.gelu(half.astype(mx.float32)).astype(mx.bfloat16)
    assert mx.mean((ours_half == ref_half).astype(mx.float32)).item() > 0.93
    assert mx.allclose(ours_half, ref_half, rtol=8e-3, atol=1e-6).item()


def test_a_bert_gives_the_same_embeddings_through_them(tiny_bert_dirs, monkeypatch):
    folder = tiny_bert_dirs[0]
    config = json.loads((folder / "config.json").read_text())
    ref_model = load_bert(folder, config, with_head=False)
    model = load_bert(folder, config, with_head=False)
    calls: list[int] = []
    real = cpa.cpu_prefill_attention
    monkeypatch.setattr(bert_cpu, "cpu_prefill_attention", lambda *a: calls.append(1) or real(*a))
    assert bert_cpu.use_cpu_paths(model) == len(model.encoder.layer)
    assert all(layer.intermediate._act is bert_cpu.gelu_rational for layer in model.encoder.layer)
    rng = np.random.default_rng(0)
    ids = mx.array(rng.integers(1000, 20000, (3, 80)))
    mask = mx.ones((3, 80), dtype=mx.int32)
    mask[1, 50:] = 0  # a padded row: its keys past 50 must not count
    ref, got = ref_model(ids, mask), model(ids, mask)
    assert len(calls) == len(model.encoder.layer)  # 80 queries: numpy's softmax
    keep = mask.astype(mx.bool_)[..., None]
    assert mx.abs(mx.where(keep, got - ref, 0)).max().item() < 1e-5
    # padding is masked: changing a padded token leaves the real ones where they were
    ids2 = mx.where(mx.arange(80)[None] >= 50, 7, ids)
    again = model(ids2, mask)
    assert mx.abs(again[1, :50] - got[1, :50]).max().item() < 1e-5
    # short inputs keep MLX's attention
    calls.clear()
    short = model(ids[:, :20], mask[:, :20])
    assert not calls
    assert mx.abs(short - ref_model(ids[:, :20], mask[:, :20])).max().item() < 1e-5


def test_an_approximate_gelu_is_left_alone(tiny_bert_dirs):
    folder = tiny_bert_dirs[1]
    config = json.loads((folder / "config.json").read_text()) | {"hidden_act": "gelu_new"}
    model = load_bert(folder, config, with_head=False)
    bert_cpu.use_cpu_paths(model)
    assert all(layer.intermediate._act is nn.gelu_approx for layer in model.encoder.layer)
    assert all(layer.attention.self._attend is bert_cpu.attention for layer in model.encoder.layer)


@pytest.mark.skipif(not ON_CPU, reason="the paths are taken on a CPU only")
def test_the_loaders_take_them_as_set(tiny_bert_dirs, tiny_cross_encoder_dir: Path):
    def attends(model) -> set:
        return {layer.attention.self._attend for layer in model.encoder.layer}

    on = load_embedding_model("e", tiny_bert_dirs[2])
    off = load_embedding_model("e", tiny_bert_dirs[2], cpu_attention="off")
    assert attends(on.model) == {bert_cpu.attention}
    assert attends(off.model) == {mx.fast.scaled_dot_product_attention}
    texts = ["a cat on a mat " * 20, "stock prices fell"]
    a, _, _ = embed(on, texts)
    b, _, _ = embed(off, texts)
    np.testing.assert_allclose(np.array(a), np.array(b), atol=2e-6)

    ce_on = load_reranker("ce", tiny_cross_encoder_dir)
    ce_off = load_reranker("ce", tiny_cross_encoder_dir, cpu_attention="off")
    assert attends(ce_on.model) == {bert_cpu.attention}
    assert attends(ce_off.model) == {mx.fast.scaled_dot_product_attention}
    docs = ["cats and dogs " * 30, "tax law"]
    on_scores, _ = rerank(ce_on, "pets", docs, None)
    off_scores, _ = rerank(ce_off, "pets", docs, None)
    assert on_scores == pytest.approx(off_scores, abs=1e-5)


def test_the_pool_passes_the_setting_to_encoder_loaders_only(monkeypatch, tmp_path):
    seen: dict[str, dict] = {}

    def loader(kind):
        return lambda name, path, **kwargs: seen.setdefault(kind, kwargs)

    monkeypatch.setattr(handles, "resolve", lambda target: loader(target.split(":")[1]))
    for kind in ("embedding", "reranker", "vlm"):
        worker = handles.make_worker("m", tmp_path, kind, "on", "off")
        worker._loader("m", tmp_path)
    assert seen["load_embedding_model"] == {"cpu_float32": "on", "cpu_attention": "off"}
    assert seen["load_reranker"] == {"cpu_float32": "on", "cpu_attention": "off"}
    assert seen["load_vlm"] == {"cpu_float32": "on"}


def test_token_capped_batches_give_the_vectors_and_scores_in_input_order(
    tiny_bert_dirs, tiny_cross_encoder_dir: Path
):
    rng = np.random.default_rng(5)
    words = ["cat", "mat", "stock", "fell", "rain", "sun", "law", "tax"]
    texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 120, 40)]
    m = load_embedding_model("e", tiny_bert_dirs[0])
    m.batch_tokens = None
    whole, tokens, _ = embed(m, texts)
    m.batch_tokens = 256  # many small passes, some inputs alone
    capped, tokens_again, _ = embed(m, texts)
    assert tokens == tokens_again
    np.testing.assert_allclose(np.array(capped), np.array(whole), atol=2e-6)
    # input order, not length order: each vector is its own text's
    alone = np.array(embed(m, [texts[7]])[0][0])
    np.testing.assert_allclose(np.array(capped[7]), alone, atol=2e-6)

    ce = load_reranker("ce", tiny_cross_encoder_dir)
    ce.batch_tokens = None
    whole_scores, _ = rerank(ce, "pets", texts, None)
    ce.batch_tokens = 256
    capped_scores, _ = rerank(ce, "pets", texts, None)
    assert capped_scores == pytest.approx(whole_scores, abs=1e-5)
    assert capped_scores[7] == pytest.approx(rerank(ce, "pets", [texts[7]], None)[0][0], abs=1e-5)
    assert len(set(np.round(capped_scores, 4))) > 5  # the scores tell the texts apart

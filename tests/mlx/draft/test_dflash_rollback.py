"""After a partial accept, the target's caches equal those of prefilling the committed tokens."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import ArraysCache, KVCache

from omlx.draft.capture import TargetAdapter

# Differential against stock mlx-lm: `pytest -m mlx_lm_diff` checks a newer mlx-lm.
pytestmark = pytest.mark.mlx_lm_diff

PROMPT = [3, 17, 42, 99, 5, 128, 7, 64, 11, 200]
BLOCK = [31, 8, 150, 77, 2, 190, 45, 66, 12, 9, 240, 101, 18, 54, 87, 123]


# A 16-token verify and a 5-token re-prefill run different GEMM shapes: OpenBLAS's Zen
# kernels put keys up to 2.2e-5 apart (its SKYLAKEX kernels stayed under 1e-5), so the
# caches get the tolerance the hidden states and logits below already have.
TOL = {"atol": 1e-4, "rtol": 1e-4}


def _assert_caches_close(got: list, want: list) -> None:
    for g, w in zip(got, want, strict=True):
        if isinstance(w, KVCache):
            assert g.offset == w.offset
            for a, b in ((g.keys, w.keys), (g.values, w.values)):
                np.testing.assert_allclose(
                    np.array(a[..., : w.offset, :]), np.array(b[..., : w.offset, :]), **TOL
                )
        else:
            assert isinstance(w, ArraysCache)
            for a, b in zip(g.cache, w.cache, strict=True):
                np.testing.assert_allclose(np.array(a), np.array(b), **TOL)


@pytest.mark.parametrize("num_keep", [1, 5, 15, 16])
def test_rollback_matches_prefill_of_committed(tiny_target, num_keep):
    _, model = tiny_target
    target = TargetAdapter(model, (0, 2))

    cache = target.make_cache()
    target.forward(mx.array(PROMPT)[None], cache)
    _, hidden, tapes = target.forward(mx.array(BLOCK)[None], cache, record_tape=True)
    target.rollback(cache, tapes, num_keep, len(BLOCK))

    reference = target.make_cache()
    target.forward(mx.array(PROMPT)[None], reference)
    _, ref_hidden, _ = target.forward(mx.array(BLOCK[:num_keep])[None], reference)
    mx.eval([c.state for c in reference])
    _assert_caches_close(cache, reference)
    # The draft's new context is the verify's captured states of the kept positions.
    np.testing.assert_allclose(
        np.array(hidden[:, :num_keep]), np.array(ref_hidden), atol=1e-4, rtol=1e-4
    )

    # Decoding continues identically from the rolled-back cache.
    nxt = mx.array([[BLOCK[num_keep % len(BLOCK)]]])
    got, _, _ = target.forward(nxt, cache)
    want, _, _ = target.forward(nxt, reference)
    np.testing.assert_allclose(np.array(got), np.array(want), atol=1e-4, rtol=1e-4)


def test_hybrid_verify_records_one_tape_per_recurrent_layer(tiny_target):
    arch, model = tiny_target
    target = TargetAdapter(model, (1,))
    cache = target.make_cache()
    target.forward(mx.array(PROMPT)[None], cache)
    _, _, tapes = target.forward(mx.array(BLOCK)[None], cache, record_tape=True)
    num_recurrent = sum(isinstance(c, ArraysCache) for c in cache)
    assert len(tapes) == num_recurrent
    assert (num_recurrent > 0) == (arch == "qwen3_5")
    # The proxies are gone once the forward returns.
    assert all(type(layer).__name__ != "_CaptureLayer" for layer in model.model.layers)
    for layer in model.model.layers:
        mixer = getattr(layer, "linear_attn", None)
        assert mixer is None or type(mixer).__name__ == "GatedDeltaNet"

"""DFlash over a target whose projections are fused (`engine.fused_projections`, on by
default on CUDA, where served DFlash targets get it): still lossless, and the 16-token
verify, its captured states and the rollback go through the fused layers."""

from __future__ import annotations

import pytest

from omlx.draft.baseline import plain_generate
from omlx.draft.capture import TargetAdapter
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.random_init import draft_config_for, random_draft
from omlx.mlx_lm_compat.fused_projections import fuse_projections
from tests.mlx.draft.conftest import VOCAB, build_target
from tests.mlx.draft.oracle import OracleDrafter

PROMPT = [3, 17, 42, 99, 5, 128, 7, 64]


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3_5"])
@pytest.mark.parametrize("pipelined", [False, True], ids=["sequential", "pipelined"])
def test_dflash_over_a_fused_target_emits_plain_greedy(arch, pipelined):
    plain = plain_generate(build_target(arch), PROMPT, DFlashParams(max_tokens=70)).tokens
    fused = build_target(arch)
    assert fuse_projections(fused) > 0

    # An oracle draft commits whole blocks of 16: full-width verifies, then a corrupted
    # one rejects the tail, so the rollback trims the fused layers' caches too.
    oracle = OracleDrafter(PROMPT, plain, VOCAB, corrupt_at=5, pipelined=pipelined)
    generator = DFlashGenerator(TargetAdapter(fused, (1, 2)), oracle, pipelined=pipelined)
    run = generator.generate(PROMPT, DFlashParams(max_tokens=49))
    assert run.run() == plain[:49]
    assert run.stats.acceptance_lengths == [6] * 8

    draft = random_draft(draft_config_for(fused), seed=1)
    params = DFlashParams(max_tokens=40)
    generated = DFlashGenerator.from_models(fused, draft, pipelined=pipelined).generate(
        PROMPT, params
    )
    assert generated.run() == plain[:40]

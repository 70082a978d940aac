"""DFlash's pure-Python halves: accept rule, stopping, stats, config (no MLX)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from omlx.draft.accept import accept_length, committed_tokens
from omlx.draft.config import DFlashConfig
from omlx.draft.stats import DFlashStats
from omlx.draft.stopping import StopCondition
from omlx.errors import DraftMismatch, InvalidRequest, OmlxError


@pytest.mark.parametrize(
    ("draft", "target", "expected"),
    [
        ([], [5], 0),
        ([1, 2, 3], [1, 2, 3, 4], 3),
        ([1, 2, 3], [1, 9, 3, 4], 1),
        ([7, 2, 3], [1, 2, 3, 4], 0),
        ([1, 2, 3], [1, 2, 8, 4], 2),
    ],
)
def test_accept_length(draft, target, expected):
    assert accept_length(draft, target) == expected


def test_committed_tokens_end_with_the_bonus():
    assert committed_tokens([1, 2, 3], [1, 2, 8, 4]) == [1, 2, 8]
    assert committed_tokens([1, 2, 3], [1, 2, 3, 4]) == [1, 2, 3, 4]
    assert committed_tokens([], [6]) == [6]


def test_stop_condition_eos_is_not_emitted():
    stop = StopCondition(max_tokens=10, eos_token_ids=[0])
    assert [stop.accept(t) for t in (4, 5, 0, 6)] == [True, True, False, False]
    assert stop.tokens == [4, 5]
    assert stop.finish_reason == "stop"


def test_stop_condition_max_tokens():
    stop = StopCondition(max_tokens=2)
    assert stop.accept(1) and stop.remaining == 1 and not stop.done
    assert stop.accept(2) and stop.finish_reason == "length"
    assert not stop.accept(3)


def test_stop_condition_stop_string_spanning_tokens():
    decode = lambda ids: "".join(chr(ord("a") + i) for i in ids)  # noqa: E731
    stop = StopCondition(max_tokens=50, stop=["cd"], decode=decode)
    emitted = [t for t in (0, 1, 2, 3, 4) if stop.accept(t)]
    assert emitted == [0, 1, 2, 3]
    assert stop.finish_reason == "stop"


def test_stop_strings_need_a_decoder():
    with pytest.raises(ValueError, match="decode"):
        StopCondition(max_tokens=5, stop=["x"])


def test_stats_tau_and_histogram():
    stats = DFlashStats(draft_block_size=4, generated_tokens=9, total_s=2.0, prefill_s=0.5)
    stats.acceptance_lengths = [4, 1, 3, 1]
    assert stats.acceptance_length == pytest.approx(2.25)
    assert stats.histogram() == {1: 2, 2: 0, 3: 1, 4: 1}
    assert stats.tokens_per_s == pytest.approx(4.5)
    assert stats.decode_tokens_per_s == pytest.approx(6.0)
    assert stats.to_dict()["cycles"] == 4
    assert DFlashStats(draft_block_size=16).acceptance_length == 0.0


PUBLISHED_CONFIG = {
    "architectures": ["DFlashDraftModel"],
    "hidden_size": 4096,
    "num_hidden_layers": 5,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "block_size": 16,
    "num_target_layers": 36,
    "dflash_config": {"target_layer_ids": [1, 9, 17, 25, 33], "mask_token_id": 151669},
}


def test_config_parses_published_layout():
    cfg = DFlashConfig.from_dict(PUBLISHED_CONFIG)
    assert cfg.block_size == 16
    assert cfg.target_layer_ids == (1, 9, 17, 25, 33)
    assert cfg.mask_token_id == 151669
    cfg.check_target(hidden_size=4096, vocab_size=151936, num_layers=36)
    nested = {k: v for k, v in PUBLISHED_CONFIG.items() if k != "block_size"}
    nested["dflash_config"] = {**PUBLISHED_CONFIG["dflash_config"], "block_size": 8}
    assert DFlashConfig.from_dict(nested).block_size == 8


def test_config_missing_keys_are_invalid_requests():
    broken = {k: v for k, v in PUBLISHED_CONFIG.items() if k != "num_target_layers"}
    with pytest.raises(InvalidRequest, match="num_target_layers"):
        DFlashConfig.from_dict(broken)


def test_check_target_lists_every_problem():
    cfg = DFlashConfig.from_dict(PUBLISHED_CONFIG)
    with pytest.raises(DraftMismatch) as info:
        cfg.check_target(hidden_size=2560, vocab_size=151669, num_layers=28)
    message = str(info.value)
    for part in ("hidden size", "vocabulary", "mask token", "[33]", "36 target layers"):
        assert part in message
    assert isinstance(info.value, OmlxError)


def test_pure_modules_import_without_mlx():
    code = (
        "import sys; sys.modules['mlx'] = None; sys.modules['mlx.core'] = None\n"
        "import omlx.draft.accept, omlx.draft.stats, omlx.draft.stopping, omlx.draft.config\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

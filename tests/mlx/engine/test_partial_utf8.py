"""A stream cut inside a multi-byte character ends without a U+FFFD (mlx-lm's real
streaming detokenizers over the tiny models' GPT-2 byte-level BPE)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from omlx.engine.text.detokenize import TextStream


@pytest.mark.parametrize("text", ["日本語", "🦜", "Ωμέγα", "𝔘𝔫𝔦"])
def test_cut_inside_a_character_drops_the_partial_bytes(tiny_llama_dir: Path, text: str) -> None:
    tokenizer = load_tokenizer(tiny_llama_dir)
    ids = tokenizer.encode(text, add_special_tokens=False)
    cuts = 0
    for n in range(1, len(ids) + 1):
        stream = TextStream(tokenizer.detokenizer, [])
        out = "".join(stream.add(t) for t in ids[:n]) + stream.finish()
        assert "\ufffd" not in out, (n, out)
        assert text.startswith(out), (n, out)
        whole = tokenizer.decode(ids[:n])
        cuts += whole.endswith("\ufffd")
    assert cuts, "no prefix ends inside a character: the case is not exercised"

"""`omlx dflash-bench`: plain decoding against DFlash speculative decoding."""

from __future__ import annotations

from omlx.cli.output import not_available


def dflash_bench() -> None:
    """Compare plain greedy decoding with DFlash on the same prompts."""
    not_available("omlx dflash-bench", "issue 6")

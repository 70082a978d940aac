"""Served DFlash against served plain decoding: the same tokens, and which attention ran.

    python benchmarks/dflash_served_check.py --model DIR --draft DIR [--prompts 8]
        [--max-tokens 64] [--out FILE]

Both paths go through the engine (`LocalModelPool`, the settings `omlx serve` would use,
OMLX_* environment included), one greedy request at a time over the shipped held-out
prompts: plain decoding through the batch generator, then the same prompts with the
draft (`DFlashPath`). Prints one JSON line: the resolved `engine.decode_attention`,
whether the kernel took the target's verifies, per-prompt equality, τ and the calls of
omlx's attention kernel made inside DFlash target passes (0 off CUDA). On a GPU this is
the check that `auto` keeps a served draft's output equal to plain serving's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from pathlib import Path

PROMPT_MODEL = "m"


def _held_out(n: int) -> list[str]:
    from omlx.draft.train.prompts import read_prompt_file, select

    by_category: dict[str, list[str]] = {}
    for r in select(read_prompt_file(None), split="heldout"):
        by_category.setdefault(r.category, []).append(r.text)
    texts = [t for group in itertools.zip_longest(*by_category.values()) for t in group if t]
    return texts[:n]


async def _serve(model: Path, prompts: list[str], max_tokens: int, path) -> list[list[int]]:
    from omlx.engine.api import ChatMessage, Failed, GenerationRequest, SamplingParams, Token
    from omlx.pool.pool import LocalModelPool
    from omlx.settings import load_settings

    alt = {PROMPT_MODEL: path} if path is not None else None
    settings = load_settings().settings  # the config file and OMLX_* as `omlx serve` reads
    pool = LocalModelPool(settings, models={PROMPT_MODEL: model}, alt_paths=alt)
    out = []
    try:
        for i, text in enumerate(prompts):
            request = GenerationRequest(
                request_id=f"check-{i}",
                model=PROMPT_MODEL,
                messages=[ChatMessage("user", text)],
                max_tokens=max_tokens,
                sampling=SamplingParams(temperature=0.0),
            )
            ids = []
            async for event in pool.generate(request):
                if isinstance(event, Failed):
                    raise event.error
                if isinstance(event, Token):
                    ids.extend(event.token_ids)
            out.append(ids)
    finally:
        await pool.close(grace_s=0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--draft", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from omlx.draft.serving import DFlashPath
    from omlx.loadgen.server_process import emit_json_line
    from omlx.mlx_lm_compat import attention_kernel
    from omlx.platform.device import on_cuda
    from omlx.settings import load_settings

    kernel_calls = 0
    original = attention_kernel.kernel_attention

    def counted(*a, **kw):  # calls the patch routes to it inside DFlash target passes
        nonlocal kernel_calls
        if attention_kernel.inside_verifying():
            kernel_calls += 1
        return original(*a, **kw)

    # The patch binds kernel_attention when it is installed, at model load: count there.
    attention_kernel.kernel_attention = counted
    prompts = _held_out(args.prompts)
    t0 = time.perf_counter()
    plain = asyncio.run(_serve(args.model, prompts, args.max_tokens, None))
    t1 = time.perf_counter()
    path = DFlashPath(args.draft)
    fast = asyncio.run(_serve(args.model, prompts, args.max_tokens, path))
    t2 = time.perf_counter()
    stats = list(path.recent_stats)
    accepted = [n for s in stats for n in s.acceptance_lengths]
    record = {
        "bench": "dflash_served_check",
        "model": str(args.model),
        "draft": str(args.draft),
        "decode_attention": load_settings().settings.engine.attention_mode(cuda=on_cuda()),
        "served_by_dflash": len(stats),
        "identical": [a == b for a, b in zip(plain, fast, strict=True)],
        "tau": round(sum(accepted) / len(accepted), 3) if accepted else None,
        "kernel_calls_in_dflash_passes": kernel_calls,
        "plain_s": round(t1 - t0, 2),
        "dflash_s": round(t2 - t1, 2),
    }
    emit_json_line(record, args.out)


if __name__ == "__main__":
    main()

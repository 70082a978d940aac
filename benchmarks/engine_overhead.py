"""Serving overhead of the engine alone: batch-1 decode tok/s, bare mlx-lm loop vs. engine.

    python benchmarks/engine_overhead.py [--model DIR] [--tokens 128] [--rounds 3] [--smoke]

Prints one JSON line. The engine path is everything but HTTP: request validation, chat
templating on the tokenizer worker, the engine thread, per-step event hand-off to asyncio
and the output parser (serving_bench.py measures the HTTP side). Rounds alternate between
the two paths; the best round of each is reported (shared CPUs are noisy), with the CPU
time per token as a load-independent check.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import time
from pathlib import Path

from model_dirs import default_model_dir, tiny_model_dir

PROMPT = "Write a long story about a lighthouse keeper and the sea."


def bare_round(model, tok, num_tokens: int) -> tuple[float, float]:
    """(decode tok/s, CPU ms per token) of mlx-lm's own generate loop, first token excluded."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    ids = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    stamps = [
        (time.perf_counter(), time.process_time())
        for _ in generate_step(mx.array(ids), model, max_tokens=num_tokens)
    ]
    return _rates(stamps)


async def engine_round(pool, num_tokens: int, i: int) -> tuple[float, float]:
    from omlx.engine.api import ChatMessage, GenerationRequest, RequestId, SamplingParams, Token

    req = GenerationRequest(
        request_id=RequestId(f"bench-{i}"),
        model="m",
        max_tokens=num_tokens,
        messages=[ChatMessage("user", PROMPT)],
        sampling=SamplingParams(temperature=0),
    )
    stamps = []
    async for event in pool.generate(req):
        if isinstance(event, Token):
            stamps += [(time.perf_counter(), time.process_time())] * len(event.token_ids)
    return _rates(stamps)


def _rates(stamps: list[tuple[float, float]]) -> tuple[float, float]:
    (w0, c0), (w1, c1) = stamps[0], stamps[-1]
    n = len(stamps) - 1
    return n / (w1 - w0), 1000 * (c1 - c0) / n


async def measure(model_dir: Path, num_tokens: int, rounds: int) -> dict[str, float]:
    from mlx_lm import load

    from omlx.pool.pool import LocalModelPool
    from omlx.settings import Settings

    model, tok = load(str(model_dir))
    pool = LocalModelPool(Settings(), models={"m": model_dir})
    bare, engine = [], []
    try:
        bare_round(model, tok, 4)  # warm-up both paths
        await engine_round(pool, 4, -1)
        for i in range(rounds):
            bare.append(bare_round(model, tok, num_tokens))
            engine.append(await engine_round(pool, num_tokens, i))
    finally:
        await pool.close()
    best_bare, best_engine = max(bare), max(engine)
    return {
        "bare_mlx_lm_tps": round(best_bare[0], 2),
        "engine_tps": round(best_engine[0], 2),
        "overhead_pct": round(100 * (1 - best_engine[0] / best_bare[0]), 1),
        "bare_cpu_ms_per_token": round(min(c for _, c in bare), 2),
        "engine_cpu_ms_per_token": round(min(c for _, c in engine), 2),
    }


def main() -> None:
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()  # the BLAS `omlx serve` runs on (OMLX_BLAS=off: MLX's reference one)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, help="MLX model folder (default: the default model)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny random model, few tokens")
    args = ap.parse_args()
    if args.smoke:
        args.model = tiny_model_dir()
        args.tokens, args.rounds = 32, 2
    elif args.model is None:
        args.model = default_model_dir()
    import mlx.core as mx

    result = asyncio.run(measure(args.model, args.tokens, args.rounds))
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(
        json.dumps(
            {
                "bench": "engine_overhead",
                "git": sha,
                "device": str(mx.default_device()),
                "machine": platform.machine(),
                "model": args.model.name,
                "tokens": args.tokens,
                "rounds": args.rounds,
                **result,
            }
        )
    )


if __name__ == "__main__":
    main()

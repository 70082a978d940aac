"""Where batch-1 decode speed goes, layer by layer: generate loop, BatchGenerator, engine.

    python benchmarks/decode_paths.py --model DIR [--tokens 256] [--rounds 5] [--smoke]
        [--profile DIR]

Paths, innermost first, rounds interleaved: mlx-lm's generate_step loop; mlx-lm's
BatchGenerator with one sequence; omlx's FusedJoinBatchGenerator with one sequence; the
omlx engine in process (engine thread, event hand-off, detokenizer, output parser). Each
reports decode tok/s (first token excluded) as median and best of the rounds, and the
CPU ms per token of this process (all threads). One JSON line. With --profile, one more
round of each synchronous path runs under cProfile and its top functions by own time go to
DIR/<path>.txt: where the CPU-bound loop spends its Python time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from engine_overhead import PROMPT, _rates, bare_round, engine_round
from model_dirs import tiny_model_dir


def generator_round(cls, model, tok, num_tokens: int) -> tuple[float, float]:
    """(decode tok/s, CPU ms per token) of one greedy sequence through a batch generator."""
    import mlx.core as mx

    ids = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    gen = cls(model, stream=mx.new_stream(mx.default_device()))
    try:
        gen.insert([ids], max_tokens=[num_tokens])
        stamps = []
        while len(stamps) < num_tokens:
            _, responses = gen.next()
            stamps += [(time.perf_counter(), time.process_time())] * len(responses)
    finally:
        gen.close()
    return _rates(stamps)


def write_profiles(paths: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, run in paths.items():
        prof = cProfile.Profile()
        prof.enable()
        run()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
        (out_dir / f"{name}.txt").write_text(text.getvalue())


async def measure(model_dir: Path, num_tokens: int, rounds: int, profile: Path | None) -> dict:
    from mlx_lm import load
    from mlx_lm.generate import BatchGenerator

    from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator
    from omlx.pool.pool import LocalModelPool
    from omlx.settings import Settings

    model, tok = load(str(model_dir))
    pool = LocalModelPool(Settings(), models={"m": model_dir})
    paths = {
        "generate_step": lambda n, i: _now(bare_round(model, tok, n)),
        "batch_generator": lambda n, i: _now(generator_round(BatchGenerator, model, tok, n)),
        "fused_join": lambda n, i: _now(generator_round(FusedJoinBatchGenerator, model, tok, n)),
        "engine": lambda n, i: engine_round(pool, n, i),
    }
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in paths}
    try:
        for run in paths.values():
            await run(8, -1)  # warm-up
        for i in range(rounds):
            for name, run in paths.items():
                got[name].append(await run(num_tokens, i))
                print(f"  round {i} {name}: {got[name][-1][0]:.1f} tok/s", flush=True)
        if profile:
            gen = functools.partial(generator_round, model=model, tok=tok, num_tokens=num_tokens)
            loops = {
                "generate_step": lambda: bare_round(model, tok, num_tokens),
                "batch_generator": lambda: gen(BatchGenerator),
                "fused_join": lambda: gen(FusedJoinBatchGenerator),
            }
            write_profiles(loops, profile)
    finally:
        await pool.close()
    out: dict = {}
    for name, rs in got.items():
        out[f"{name}_tps_median"] = round(statistics.median(r[0] for r in rs), 2)
        out[f"{name}_tps_best"] = round(max(r[0] for r in rs), 2)
        out[f"{name}_cpu_ms_per_token"] = round(min(r[1] for r in rs), 2)
        out[f"{name}_rounds_tps"] = [round(r[0], 2) for r in rs]
    return out


async def _now(value):
    return value


def main() -> None:
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="tiny random model, few tokens")
    ap.add_argument("--out", type=Path, help="append the JSON line to this file")
    ap.add_argument("--profile", type=Path, help="write cProfile tables of the loops here")
    args = ap.parse_args()
    if args.smoke:
        args.model = tiny_model_dir()
        args.tokens, args.rounds = 16, 1
    if args.model is None:
        ap.error("--model is required (or --smoke)")
    import mlx.core as mx

    from omlx.loadgen.server_process import emit_json_line, run_facts

    result = asyncio.run(measure(args.model, args.tokens, args.rounds, args.profile))
    emit_json_line(
        {
            "bench": "decode_paths",
            **run_facts(),
            "device": str(mx.default_device()),
            "model": args.model.name,
            "tokens": args.tokens,
            "rounds": args.rounds,
            **result,
        },
        args.out,
    )


if __name__ == "__main__":
    main()

"""Where batch-1 decode speed goes, layer by layer: generate loop, BatchGenerator, engine.

    python benchmarks/decode_paths.py --model DIR [--tokens 256] [--rounds 5] [--smoke]

Paths, innermost first, rounds interleaved: mlx-lm's generate_step loop; mlx-lm's
BatchGenerator with one sequence; omlx's FusedJoinBatchGenerator with one sequence; the
omlx engine in process (engine thread, event hand-off, detokenizer, output parser). Each
reports decode tok/s (first token excluded) as median and best of the rounds, and the
CPU ms per token of this process (all threads). One JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from engine_overhead import PROMPT, _rates, bare_round, engine_round


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


async def measure(model_dir: Path, num_tokens: int, rounds: int) -> dict:
    from mlx_lm import load
    from mlx_lm.generate import BatchGenerator

    from omlx.engine.fused_join import FusedJoinBatchGenerator
    from omlx.engine.pool import ModelPool
    from omlx.settings import Settings

    model, tok = load(str(model_dir))
    pool = ModelPool(Settings(), models={"m": model_dir})
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
    from omlx.engine.blas import reexec_with_blas

    reexec_with_blas()
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="tiny random model, few tokens")
    ap.add_argument("--out", type=Path, help="append the JSON line to this file")
    args = ap.parse_args()
    if args.smoke:
        sys.path.insert(0, str(Path(__file__).parents[1]))  # the repo's tests package
        from tests.fixtures.tiny_models import build_tiny_model

        args.model = build_tiny_model("llama", Path(tempfile.mkdtemp()) / "tiny")
        args.tokens, args.rounds = 16, 1
    if args.model is None:
        ap.error("--model is required (or --smoke)")
    import mlx.core as mx

    from omlx.loadgen.server_process import emit_json_line, run_facts

    result = asyncio.run(measure(args.model, args.tokens, args.rounds))
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

"""Decode and prefill step time, stock nn.Linear against input-major linears (CPU).

    python benchmarks/weight_layout_bench.py [--model DIR] [--rounds 4] [--smoke] [--out FILE]

Two copies of the model (default: the default model) in one process, one as mlx-lm loads
it and one with omlx's input-major linears (omlx/platform/weight_layout.py); rounds
alternate between them. Per batch size, one decode step's wall time (a cache of 200
tokens per row), median of rounds; a 173-token prefill; the largest logit difference
between the two. Runs on the optimized BLAS, as omlx does. One JSON line.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from model_dirs import default_model_dir, tiny_model_dir

BATCHES = (1, 4, 8, 16)
CONTEXT = 200
PREFILL = 173


def _time(fn, n: int) -> float:
    import mlx.core as mx

    mx.eval(fn())
    t0 = time.perf_counter()
    for _ in range(n):
        mx.eval(fn())
    return (time.perf_counter() - t0) / n


def decode_step_s(model, batch: int, steps: int) -> float:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    model(mx.array([list(range(100, 100 + CONTEXT))] * batch), cache=cache)
    mx.eval([c.state for c in cache])
    y = mx.array([[5]] * batch)
    # Each timed call appends one position: a few steps barely move the context.
    return _time(lambda: model(y, cache=cache)[:, -1], steps)


def prefill_s(model, n: int) -> float:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    ids = mx.array([list(range(100, 100 + PREFILL))])

    def run():
        cache = make_prompt_cache(model)
        model(ids, cache=cache)
        return [c.state for c in cache]

    return _time(run, n)


def measure(model_dir: Path, rounds: int, steps: int) -> dict:
    import mlx.core as mx
    from mlx_lm import load

    from omlx.platform.weight_layout import use_input_major_linears

    stock, _ = load(str(model_dir))
    swapped, _ = load(str(model_dir))
    num_swapped = use_input_major_linears(swapped)
    probe = mx.array([[1, 2, 3, 4, 5, 6, 7, 8]])
    diff = mx.abs(stock(probe) - swapped(probe)).max().item()
    models = {"stock": stock, "input_major": swapped}
    got: dict[str, list[float]] = {}
    for r in range(rounds):
        for batch in BATCHES:
            for name, model in models.items():
                ms = 1000 * decode_step_s(model, batch, steps)
                got.setdefault(f"{name}_decode_b{batch}_ms", []).append(ms)
        for name, model in models.items():
            got.setdefault(f"{name}_prefill_ms", []).append(1000 * prefill_s(model, 2))
        print(f"  round {r} done", flush=True)
    out: dict = {"linears_swapped": num_swapped, "max_abs_logit_diff": diff}
    for key, values in got.items():
        out[key] = round(statistics.median(values), 2)
    for batch in BATCHES:
        s, t = out[f"stock_decode_b{batch}_ms"], out[f"input_major_decode_b{batch}_ms"]
        out[f"decode_b{batch}_speedup"] = round(s / t, 3)
    out["prefill_speedup"] = round(out["stock_prefill_ms"] / out["input_major_prefill_ms"], 3)
    out["rounds_ms"] = {k: [round(x, 1) for x in v] for k, v in got.items()}
    return out


def main() -> None:
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8, help="timed decode steps per reading")
    ap.add_argument("--smoke", action="store_true", help="tiny random model, one round")
    ap.add_argument("--out", type=Path, help="append the JSON line to this file")
    args = ap.parse_args()
    if args.smoke:
        args.model = tiny_model_dir()
        args.rounds, args.steps = 1, 2
    if args.model is None:
        args.model = default_model_dir()
    from omlx.loadgen.server_process import emit_json_line, run_facts
    from omlx.platform import blas

    result = measure(args.model, args.rounds, args.steps)
    record = {"bench": "weight_layout", **run_facts(), "blas": blas.blas_description()}
    emit_json_line({**record, "model": args.model.name, **result}, args.out)


if __name__ == "__main__":
    main()

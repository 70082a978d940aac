"""Prefill of one long prompt on the CPU: MLX's attention against omlx's split attention.

    python -m benchmarks.cpu_prefill_split [--tokens 3129] [--chunk 512] [--repeats 2]
        [--out benchmarks/results/cpu_prefill_split.jsonl]

The default model (SmolLM2-135M-Instruct, float32 as the CPU serves it), a prompt of
`--tokens` tokens prefilled in `--chunk`-token chunks through mlx-lm's own model and
cache, the way its `generate` does: stock (the peer) and with
omlx/mlx_lm_compat/split_attention.py installed, alternating, `--repeats` times each, in
one process. 3,129 tokens is the OpenClaw agent's first request in the launch tests.
Prints and appends one JSON line with the seconds of each run, the ratio of the medians
and the largest difference of the last position's logits.

An experiment, not in `omlx serve`: MLX's CPU attention runs its softmax on one thread,
and here a chunk's query rows are split in one part a core, each part on a CPU stream
of its own, over all the keys with its rows of the mask (bit-identical logits in this
single-request loop). Wired into the engine it changed a greedy reply of the real model
under CPU load (benchmarks/results/cpu_prefill_split.md), so it stays here until that is
understood.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.model_dirs import default_model_dir
from omlx.platform.blas import blas_description, reexec_with_blas

MIN_PART_ROWS = 32  # parts of ~11 rows came out a rounding away from MLX's numbers


def split_attention(mx, queries, keys, values, scale, mask, streams):
    """MLX's attention with the query rows in len(streams) + 1 parts, the first on the
    current stream; each part over all the keys with its rows of the mask."""
    n, s = queries.shape[2], keys.shape[2]
    parts = max(1, min(len(streams) + 1, n // MIN_PART_ROWS))
    bounds = [n * i // parts for i in range(parts + 1)]
    outs = []
    for lo, hi, stream in zip(bounds, bounds[1:], [None, *streams], strict=False):
        m = mask
        if isinstance(mask, str):  # query row l sits at key position s - n + l
            m = mx.arange(s)[None] <= (mx.arange(lo, hi) + (s - n))[:, None]
        elif isinstance(mask, mx.array) and mask.ndim >= 2 and mask.shape[-2] == n:
            m = mask[..., lo:hi, :]
        outs.append(
            mx.fast.scaled_dot_product_attention(
                queries[:, :, lo:hi], keys, values, scale=scale, mask=m, stream=stream
            )
        )
    return mx.concatenate(outs, axis=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model folder (default: the default model)")
    ap.add_argument("--tokens", type=int, default=3129)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    reexec_with_blas()

    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache

    from omlx.mlx_lm_compat.attention_patch import patch_attention, restore_attention

    mx.set_default_device(mx.cpu)
    path = Path(args.model) if args.model else default_model_dir()
    model, _ = load(str(path))
    ids = mx.array([[(i * 7919) % 40000 + 100 for i in range(args.tokens)]])

    def prefill() -> tuple[float, mx.array]:
        cache = make_prompt_cache(model)
        start = time.perf_counter()
        for s in range(0, args.tokens, args.chunk):
            out = model(ids[:, s : s + args.chunk], cache=cache)
            mx.eval([c.state for c in cache])
        last = out[0, -1]
        mx.eval(last)
        return time.perf_counter() - start, last

    parts = max(1, min(os.cpu_count() or 1, 8))
    streams = [mx.new_stream(mx.cpu) for _ in range(parts - 1)]

    def takes(q, k, v, mask):
        return q.ndim == 4 and q.shape[2] >= 2 * MIN_PART_ROWS

    def computes(q, k, v, scale, mask):
        return split_attention(mx, q, k, v, scale, mask, streams)

    seconds: dict[str, list[float]] = {"mlx": [], "split": []}
    logits = {}
    for _ in range(args.repeats):
        for arm in ("mlx", "split"):
            if arm == "split":
                patch_attention(model, takes, computes, "bench_split")
            else:
                restore_attention(model, "bench_split")
            dt, logits[arm] = prefill()
            seconds[arm].append(round(dt, 2))
            print(arm, f"{dt:.2f} s", flush=True)
    mlx_s, split_s = statistics.median(seconds["mlx"]), statistics.median(seconds["split"])
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    line = {
        "bench": "cpu_prefill_split",
        "model": path.name,
        "tokens": args.tokens,
        "chunk": args.chunk,
        "parts": parts,
        "cores": os.cpu_count(),
        "blas": blas_description(),
        "seconds": seconds,
        "speedup": round(mlx_s / split_s, 3),
        "max_logit_diff": mx.abs(logits["mlx"] - logits["split"]).max().item(),
        "git": git.stdout.strip(),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
    }
    print(json.dumps(line))
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()

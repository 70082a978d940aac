"""Batch-1 decode step cost by KV cache kind: KVCache, BatchKVCache, BatchKVCache unmasked.

    python benchmarks/cache_decode_probe.py [--shape qwen3-8b] [--tokens 256] [--rounds 4]
        [--batch 1]

The same pipelined greedy loop (next step dispatched before the current token is read, as
mlx-lm's loops do) over one random-weight model; only the cache differs. Prints one JSON
line: tok/s (median of rounds) and CPU ms per step for each. With --batch B, B rows of
equal length (no padding, so the mask is all true and dropping it changes nothing): what
the mask array costs a batched decode step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def decode(model, cache, first: int, n: int, batch: int = 1) -> tuple[float, float]:
    import mlx.core as mx

    def step(y):
        return mx.argmax(model(y, cache=cache)[:, -1], axis=-1)[:, None]

    nxt = step(mx.array([[first]] * batch))
    mx.async_eval(nxt)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        cur, nxt = nxt, step(nxt)
        mx.async_eval(nxt)
        cur.tolist()
    # tok/s over all rows; CPU ms per step
    return n * batch / (time.perf_counter() - t0), 1000 * (time.process_time() - c0) / n


def main() -> None:
    import mlx.core as mx
    from dflash_bench import build_target
    from mlx_lm.models import cache as cache_mod

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1, help="rows decoded together")
    args = ap.parse_args()
    model = build_target(args.shape, mx.bfloat16 if args.shape != "tiny" else mx.float32)
    prompt = mx.array([list(range(10, 50))] * args.batch)

    class Unmasked(cache_mod.BatchKVCache):
        def make_mask(self, N, return_array=False, **kwargs):
            return None if N == 1 else super().make_mask(N, return_array, **kwargs)

    pad = [0] * args.batch
    kinds = {
        "kv_cache": lambda: cache_mod.make_prompt_cache(model),
        "batch_kv_cache": lambda: [cache_mod.BatchKVCache(pad) for _ in model.layers],
        "batch_kv_unmasked": lambda: [Unmasked(pad) for _ in model.layers],
    }
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for r in range(args.rounds + 1):
        for name, make in kinds.items():
            c = make()
            model(prompt, cache=c)
            mx.eval([x.state for x in c])
            res = decode(model, c, 7, 16 if r == 0 else args.tokens, args.batch)
            if r:
                got[name].append(res)
                print(f"  round {r} {name}: {res[0]:.1f} tok/s", flush=True)
    out = {"bench": "cache_decode_probe", "device": str(mx.default_device()), "shape": args.shape}
    out["batch"] = args.batch
    for name, rs in got.items():
        out[f"{name}_tps"] = round(statistics.median(x[0] for x in rs), 2)
        out[f"{name}_cpu_ms_per_step"] = round(statistics.median(x[1] for x in rs), 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

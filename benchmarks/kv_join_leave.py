"""What one sequence leaving and one joining cost a running batch's KV cache.

    python benchmarks/kv_join_leave.py [--layers 30] [--heads 3] [--head-dim 64]
        [--shapes 16x600,64x330,256x356] [--dtype float32] [--out FILE]

SmolLM2-135M's cache shape by default (30 layers, 3 KV heads of 64). For each rows x
positions, a full cache is built, then one row leaves (`filter`) and one 100-token
prompt joins (`extend`), each evaluated and timed: mlx-lm's BatchKVCache (a gather and
a pad-and-concatenate of the whole cache) against omlx's SlotKVCache (the rows moved
and written in place). One JSON line per shape and cache (--out appends).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--shapes", default="16x600,64x330,256x356")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache

    from omlx.mlx_lm_compat.slot_cache import SlotKVCache, swap_remove_order

    dtype = getattr(mx, args.dtype)

    def build(rows: int, length: int, slots: bool) -> list:
        caches = []
        for _ in range(args.layers):
            c = BatchKVCache([0] * rows)
            shape = (rows, args.heads, length, args.head_dim)
            c.update_and_fetch(
                mx.random.normal(shape).astype(dtype), mx.random.normal(shape).astype(dtype)
            )
            caches.append(SlotKVCache.adopt(c) if slots else c)
        mx.eval([c.keys for c in caches] + [c.values for c in caches])
        return caches

    def timed(caches: list, fn) -> float:
        t0 = time.perf_counter()
        for c in caches:
            fn(c)
        mx.eval([c.keys for c in caches] + [c.values for c in caches])
        return time.perf_counter() - t0

    for spec in args.shapes.split(","):
        rows, length = (int(x) for x in spec.split("x"))
        for slots in (False, True):
            caches = build(rows, length, slots)
            keep = list(range(1, rows))
            order = swap_remove_order(keep) if slots else keep
            leave = timed(caches, lambda c, order=order: c.filter(order))
            joining = build(1, 100, False)
            it = iter(joining)
            join = timed(caches, lambda c, it=it: c.extend(next(it)))
            line = {
                "bench": "kv_join_leave",
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "machine": platform.machine(),
                "device": str(mx.default_device()),
                "cache": "SlotKVCache" if slots else "BatchKVCache",
                "rows": rows,
                "positions": length,
                "cache_gb": round(sum(c.keys.nbytes + c.values.nbytes for c in caches) / 1e9, 2),
                "leave_ms": round(leave * 1000, 1),
                "join_ms": round(join * 1000, 1),
                "command": " ".join(sys.orig_argv),
            }
            print(json.dumps(line), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(line) + "\n")
            del caches, joining
            mx.clear_cache()


if __name__ == "__main__":
    main()

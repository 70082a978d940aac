"""What it costs the host when many rows leave a running batch at once.

    python benchmarks/leave_extract.py [--layers 36] [--kv-heads 8] [--head-dim 128]
        [--dtype bfloat16] [--shapes 64x330,128x330,256x330] [--leaving 1.0]
        [--in-flight 8] [--repeats 5] [--out FILE]

The Qwen3-8B shape's cache by default (36 layers, 8 KV heads of 128, bf16). For each
rows x positions a slot cache is built per layer (rows with different left paddings),
work is queued on the device as a decode step in flight would be (`--in-flight` 4096 x
4096 matmuls), and then a share of the rows (`--leaving`) leaves in one step, three ways:

- `per-row`: mlx-lm's `BatchKVCache.extract` for each (row, layer), which reads the whole
  padding array back from the device each time (evaluated at once on a CPU, as omlx's
  extract did), then the filter (which reads the gathered padding back once a layer);
- `batched`: each layer's padding read once for all leaving rows
  (`PrimedGenerationBatch.extract_cache`), and the filter given what was read;
- `gathered`: the leaving rows of each layer in one gather (`SlotKVCache.extract_rows`),
  each row cut out only when read (`LeftRowKVCache`: here by the evaluation after).

`host_ms` is the leave itself (what the engine thread spends before it can build the next
step), `total_ms` with the extracted rows evaluated as the prefix store then does. The
median of --repeats, one JSON line per shape and way (--out appends).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--shapes", default="64x330,128x330,256x330")
    ap.add_argument("--leaving", type=float, default=1.0, help="share of the rows leaving")
    ap.add_argument("--in-flight", type=int, default=8, help="queued matmuls (0: none)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ways", default="per-row,batched,gathered", help="in this order")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache

    from omlx.mlx_lm_compat.slot_cache import SlotKVCache, swap_remove_order, waits_for_in_place

    dtype = getattr(mx, args.dtype)

    def build(rows: int, positions: int) -> list[SlotKVCache]:
        pads = [(7 * r) % 40 for r in range(rows)]
        layers = []
        for _ in range(args.layers):
            cache = SlotKVCache.adopt(BatchKVCache(pads))
            shape = (rows, args.kv_heads, positions, args.head_dim)
            cache.update_and_fetch(mx.random.normal(shape).astype(dtype), mx.zeros(shape, dtype))
            layers.append(cache)
        mx.eval([(c.keys, c.values, c.left_padding, c.offset) for c in layers])
        for c in layers:  # as after a filter: a lazily gathered padding, read once since
            c.left_padding = c.left_padding[mx.arange(rows)]
            c.left_padding.tolist()
        return layers

    def in_flight() -> None:
        if args.in_flight:
            w = mx.random.normal((4096, 4096))
            mx.eval(w)
            y = w
            for _ in range(args.in_flight):
                y = y @ w
            mx.async_eval(y)

    def old_extract(c: SlotKVCache, i: int):  # SlotKVCache.extract before the change
        row = BatchKVCache.extract(c, i)
        if waits_for_in_place():
            mx.eval(row.keys, row.values)
        return row

    def per_row(layers: list[SlotKVCache], leaving: list[int], keep: list[int]) -> list:
        out = [[old_extract(c, i) for c in layers] for i in leaving]
        for c in layers:
            c.filter(keep)
        return out

    def batched(layers: list[SlotKVCache], leaving: list[int], keep: list[int]) -> list:
        pads = [c.left_padding.tolist() for c in layers]
        out = [[c.extract_row(i, p[i]) for c, p in zip(layers, pads, strict=True)] for i in leaving]
        for c, p in zip(layers, pads, strict=True):
            c.known_padding = p
            c.filter(keep)
        return out

    def gathered(layers: list[SlotKVCache], leaving: list[int], keep: list[int]) -> list:
        pads = [c.left_padding.tolist() for c in layers]
        by_layer = [c.extract_rows(leaving, p) for c, p in zip(layers, pads, strict=True)]
        for c, p in zip(layers, pads, strict=True):
            c.known_padding = p
            c.filter(keep)
        return [list(row) for row in zip(*by_layer, strict=True)]

    for shape in args.shapes.split(","):
        rows, positions = (int(x) for x in shape.split("x"))
        n_leaving = max(1, round(rows * args.leaving))
        leaving = list(range(0, rows, max(1, rows // n_leaving)))[:n_leaving]
        keep = swap_remove_order([r for r in range(rows) if r not in set(leaving)])
        ways = {"per-row": per_row, "batched": batched, "gathered": gathered}
        names = args.ways.split(",")
        host: dict[str, list[float]] = {n: [] for n in names}
        total: dict[str, list[float]] = {n: [] for n in names}
        # Interleaved, the first round not counted: on a CPU, whichever way ran first on
        # fresh memory took 10x longer (the allocator's first touches, not the way).
        for _ in range(args.repeats + 1):
            for name in names:
                layers = build(rows, positions)
                in_flight()
                t0 = time.perf_counter()
                out = ways[name](layers, leaving, keep)
                t1 = time.perf_counter()
                mx.eval([(c.keys, c.values) for row in out for c in row])
                t2 = time.perf_counter()
                host[name].append((t1 - t0) * 1e3)
                total[name].append((t2 - t0) * 1e3)
                del layers, out
        for name in names:
            record = {
                "bench": "leave_extract",
                "way": name,
                "rows": rows,
                "positions": positions,
                "leaving": len(leaving),
                "layers": args.layers,
                "kv_heads": args.kv_heads,
                "head_dim": args.head_dim,
                "dtype": args.dtype,
                "in_flight_matmuls": args.in_flight,
                "host_ms": round(statistics.median(host[name][1:]), 2),
                "total_ms": round(statistics.median(total[name][1:]), 2),
                "device": str(mx.default_device()),
                "machine": platform.machine(),
                "command": " ".join(sys.argv),
            }
            print(json.dumps(record), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()

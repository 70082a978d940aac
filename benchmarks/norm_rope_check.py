"""omlx's query/key norm-and-rotation kernel against MLX's norms and rope on a CUDA GPU.

    python benchmarks/norm_rope_check.py [--out FILE] [--repeats 7]

For each case (the Qwen3-8B shape's decode step at 1, 64 and 256 rows with an offset a
row, a 16-token chunk from a lone cache's int offset, a prefill chunk of 512 tokens,
bf16 and float32), the queries and keys are slices of one fused projection output, as
the model hands them over. It checks `norm_rope` against `mx.fast.rms_norm` then
`mx.fast.rope` (reshaped and transposed as mlx-lm's Qwen3 does) and a float32 reference,
then times 36 layers of each (one call a layer, all in one graph), device time and the
host's time to build and launch them: medians of --repeats after a warm-up. One JSON
line per case; exit status 1 if any error is out of bounds. Needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# name, rows, tokens, heads, kv heads, head dim, dtype, per-row offsets
CASES = [
    ("8b-decode-1", 1, 1, 32, 8, 128, "bfloat16", True),
    ("8b-decode-64", 64, 1, 32, 8, 128, "bfloat16", True),
    ("8b-decode-256", 256, 1, 32, 8, 128, "bfloat16", True),
    ("8b-chunk-16", 1, 16, 32, 8, 128, "bfloat16", False),
    ("8b-prefill-512", 4, 512, 32, 8, 128, "bfloat16", True),
    ("0.6b-decode-64-f32", 64, 1, 16, 8, 128, "float32", True),
]
LAYERS = 36


def build(case, mx):
    _, b, n, heads, kv, d, dtype, per_row = case
    dt = getattr(mx, dtype)
    x = mx.random.normal((b, n, (heads + 2 * kv) * d)).astype(dt)
    q, k = x[..., : heads * d], x[..., heads * d : (heads + kv) * d]
    qw, kw = (mx.random.uniform(0.5, 1.5, (d,)).astype(dt) for _ in range(2))
    offset = mx.arange(b, dtype=mx.int32) * 7 + 100 if per_row else 321
    mx.eval(x, qw, kw)
    return q, k, qw, kw, offset


def mlx_path(q, k, qw, kw, offset, heads, kv, mx):
    b, n, _ = q.shape

    def one(x, w, count):
        x = mx.fast.rms_norm(x.reshape(b, n, count, -1), w, 1e-6).transpose(0, 2, 1, 3)
        return mx.fast.rope(x, x.shape[-1], traditional=False, base=1e6, scale=1.0, offset=offset)

    return one(q, qw, heads), one(k, kw, kv)


def reference(q, k, qw, kw, offset, heads, kv, mx):
    f = mx.float32
    return mlx_path(q.astype(f), k.astype(f), qw.astype(f), kw.astype(f), offset, heads, kv, mx)


def timed(fn, repeats, mx) -> tuple[float, float]:
    """(device+host ms, host-only ms to build and launch) medians."""
    mx.eval(fn())
    walls, hosts = [], []
    for _ in range(repeats):
        mx.synchronize()
        t0 = time.perf_counter()
        outs = fn()
        mx.async_eval(outs)
        t1 = time.perf_counter()
        mx.eval(outs)
        mx.synchronize()
        walls.append(time.perf_counter() - t0)
        hosts.append(t1 - t0)
    return round(1e3 * statistics.median(walls), 3), round(1e3 * statistics.median(hosts), 3)


def check(case, repeats: int, mx, norm_rope) -> dict:
    """One case's line: errors against the float32 reference, times both ways."""
    name, _, _, heads, kv, _, dtype, _ = case
    q, k, qw, kw, offset = build(case, mx)
    line = {"case": name, "shape": list(case[1:])}
    kw_args = dict(heads=heads, kv_heads=kv, eps=1e-6, base=1e6, scale=1.0, offset=offset)
    try:
        ours = norm_rope(q, k, qw, kw, **kw_args)
        mx.eval(ours)
    except Exception as e:  # a compile error shows here, once
        line["error"] = f"{type(e).__name__}: {e}"[:2000]
        line["ok"] = False
        return line
    theirs = mlx_path(q, k, qw, kw, offset, heads, kv, mx)
    ref = reference(q, k, qw, kw, offset, heads, kv, mx)

    def worst(outs):
        return max(
            mx.abs(a.astype(mx.float32) - r).max().item() for a, r in zip(outs, ref, strict=True)
        )

    err, err_mlx = worst(ours), worst(theirs)
    bound = max(2 * err_mlx, 1e-4 if dtype == "float32" else 4e-2)
    line.update(max_err_kernel=round(err, 6), max_err_mlx=round(err_mlx, 6))
    same_shapes = all(a.shape == b.shape for a, b in zip(ours, theirs, strict=True))
    line["ok"] = bool(err <= bound) and same_shapes
    wall, host = timed(
        lambda: [norm_rope(q, k, qw, kw, **kw_args) for _ in range(LAYERS)], repeats, mx
    )
    line.update(kernel_ms=wall, kernel_host_ms=host)
    wall, host = timed(
        lambda: [mlx_path(q, k, qw, kw, offset, heads, kv, mx) for _ in range(LAYERS)], repeats, mx
    )
    line.update(mlx_ms=wall, mlx_host_ms=host, layers=LAYERS)
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    import mlx.core as mx

    from omlx.mlx_lm_compat.norm_rope_kernel import norm_rope

    if not mx.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    failed = 0
    for case in CASES:
        line = check(case, args.repeats, mx, norm_rope)
        failed += not line["ok"]
        print(json.dumps(line), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(line) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

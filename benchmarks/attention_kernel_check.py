"""omlx's attention kernel against MLX's attention on a CUDA GPU: same outputs, and time.

    python benchmarks/attention_kernel_check.py [--out FILE] [--repeats 7]
        [--variants pairs,prefetch,pairs+prefetch,keys4,pairs+keys2]

For each case (the Qwen3-8B shape's masked decode at 1-256 rows with ragged left padding,
its lone unmasked row, SmolLM2's 16-query DFlash verify under "causal" and under an
array mask, a draft block with no mask, float32 and float16 variants), keys and values
are slices of larger buffers (as a KV cache hands them over) and the queries a transposed
view (as the model's attention makes them). It checks `kernel_attention` against
`mx.fast.scaled_dot_product_attention` (MLX's fused kernel or its composed fallback) and
a float32 reference, then times a model's worth of layers (one call a layer, each on its
own keys, each layer's output the next one's queries, all in one graph) both ways:
medians of --repeats, after a warm-up. Chained, as a model's layers are: independent
calls run side by side in MLX's CUDA graph, which hid the latency of a small grid (a
lone 16-query verify: 0.82 ms for 30 layers that way, 3.5 ms inside the model on the
same H100; the eighteenth session's notes). Lines carry "timing": "chained". --variants
also checks and times the kernel's candidate loads in the same process (`pairs`: two
neighbouring elements a load; `prefetch`: the next key's loads before this key's
arithmetic; `keysN`: N keys' loads issued together; `lanes`: a key a lane instead of a
key a warp; `qpbN`: N query vectors a block for calls of several queries; parts joined
by "+"; `first`: none, the first kernel), whatever the module's defaults are. One JSON
line per case; exit status 1 if any case's error is out of bounds. Needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name, rows, heads, kv heads, queries, keys, head dim, dtype, mask kind, layers
CASES = [
    ("8b-decode-1", 1, 32, 8, 1, 330, 128, "bfloat16", "array", 36),
    ("8b-decode-1-nomask", 1, 32, 8, 1, 330, 128, "bfloat16", "none", 36),
    ("8b-decode-64", 64, 32, 8, 1, 330, 128, "bfloat16", "array", 36),
    ("8b-decode-128", 128, 32, 8, 1, 330, 128, "bfloat16", "array", 36),
    ("8b-decode-256", 256, 32, 8, 1, 330, 128, "bfloat16", "array", 36),
    ("8b-decode-64-long", 64, 32, 8, 1, 2100, 128, "bfloat16", "array", 36),
    ("8b-decode-64-f16", 64, 32, 8, 1, 330, 128, "float16", "array", 36),
    ("smollm2-verify-causal", 1, 9, 3, 16, 400, 64, "float32", "causal", 30),
    ("smollm2-verify-array", 1, 9, 3, 16, 400, 64, "float32", "causal-array", 30),
    ("smollm2-verify-bf16", 1, 9, 3, 16, 400, 64, "bfloat16", "causal", 30),
    ("smollm2-draft-block", 1, 9, 3, 16, 416, 64, "float32", "none", 5),
    ("smollm2-decode-64", 64, 9, 3, 1, 330, 64, "float32", "array", 30),
]


def build(case, mx):
    _, b, h, kv, n, s, d, dtype, mask_kind, layers = case
    dt = getattr(mx, dtype)
    key = mx.random.key(7)
    k1, k2, k3, k4 = mx.random.split(key, 4)
    extra = 37  # the cache's spare room past the keys in use, and an offset before them
    # [B, L, H, D] transposed to [B, H, L, D], as the model hands queries over
    q = mx.random.normal((b, n, h, d), key=k1).astype(dt).transpose(0, 2, 1, 3)
    kbuf = mx.random.normal((b, kv, s + 2 * extra, d), key=k2).astype(dt)
    vbuf = mx.random.normal((b, kv, s + 2 * extra, d), key=k3).astype(dt)
    k = kbuf[:, :, extra : extra + s, :]
    v = vbuf[:, :, extra : extra + s, :]
    if mask_kind == "array":  # left padding of up to a third of the keys, row by row
        pad = mx.random.randint(0, s // 3, (b,), key=k4)
        pad = mx.where(mx.arange(b) == 0, 0, pad)
        mask = mx.arange(s)[None, None, None, :] >= pad[:, None, None, None]
    elif mask_kind == "causal-array":
        rows = mx.arange(s - n, s)[:, None]
        mask = (rows >= mx.arange(s)[None, :])[None, None]
    elif mask_kind == "causal":
        mask = "causal"
    else:
        mask = None
    mx.eval(q, kbuf, vbuf, k, v, *([mask] if isinstance(mask, mx.array) else []))
    return q, k, v, mask, d**-0.5, layers


def reference(q, k, v, scale, mask, mx):
    """float32, the plain way."""
    q32, k32, v32 = (x.astype(mx.float32) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k32 = mx.repeat(k32, group, axis=1)
    v32 = mx.repeat(v32, group, axis=1)
    scores = (q32 * scale) @ k32.swapaxes(-1, -2)
    n, s = q.shape[2], k.shape[2]
    if isinstance(mask, str):
        mask = mx.arange(s - n, s)[:, None] >= mx.arange(s)[None, :]
    if mask is not None:
        scores = mx.where(mask, scores, -mx.inf)
    return mx.softmax(scores, axis=-1) @ v32


def timed(fn, repeats):
    fn()  # compile, capture
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_kernel(q, layers, scale, mask, repeats, mx) -> float:
    """Milliseconds for a model's worth of chained layers in one graph, through the kernel."""
    from omlx.mlx_lm_compat.attention_kernel import kernel_attention

    def ours():
        x = q
        for k, v in layers:
            x = kernel_attention(x, k, v, scale, mask)
        mx.eval(x)

    return round(1e3 * timed(ours, repeats), 3)


def time_mlx(q, layers, scale, mask, repeats, mx) -> float:
    def theirs():
        x = q
        for k, v in layers:
            x = mx.fast.scaled_dot_product_attention(x, k, v, scale=scale, mask=mask)
        mx.eval(x)

    return round(1e3 * timed(theirs, repeats), 3)


def set_variant(name: str) -> None:
    """Set the kernel module's candidate flags from "+"-joined parts: "first" (none),
    "pairs", "prefetch", "keysN" (N keys' loads together), "lanes" (a key a lane),
    "qpbN" (N query vectors a block when a call has several), e.g. "pairs+keys4". A flag
    a name leaves out is off, whatever the module's default."""
    from omlx.mlx_lm_compat import attention_kernel

    parts = set(name.split("+")) - {"first"}
    batches = [p for p in parts if p.startswith("keys") and p[4:].isdigit()]
    blocks = [p for p in parts if p.startswith("qpb") and p[3:].isdigit()]
    unknown = parts - {"pairs", "prefetch", "lanes"} - set(batches) - set(blocks)
    if unknown or len(batches) > 1 or len(blocks) > 1:
        raise SystemExit(f"unknown variant {name!r}")
    attention_kernel.PAIRED_LOADS = "pairs" in parts
    attention_kernel.PREFETCH_NEXT_KEY = "prefetch" in parts
    attention_kernel.KEY_BATCH = int(batches[0][4:]) if batches else 1
    attention_kernel.LANE_KEYS = "lanes" in parts
    attention_kernel.MULTI_QUERY_BLOCK = int(blocks[0][3:]) if blocks else None


def emit(line: dict, out: str) -> None:
    print(json.dumps(line), flush=True)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(line) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--cases", default="", help="comma-separated names (default: all)")
    ap.add_argument("--variants", default="", help="candidate loads also timed, comma-separated")
    args = ap.parse_args()
    import mlx.core as mx

    from omlx.mlx_lm_compat import attention_kernel
    from omlx.mlx_lm_compat.attention_kernel import kernel_attention, takes_kernel

    if not mx.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    wanted = {c for c in args.cases.split(",") if c}
    failed = 0
    for case in CASES:
        if wanted and case[0] not in wanted:
            continue
        q, k, v, mask, scale, layers = build(case, mx)
        line = {"case": case[0], "shape": case[1:8], "mask": case[8], "layers": layers}
        line["timing"] = "chained"
        line["takes"] = takes_kernel(q, k, v, mask)
        try:
            ours = kernel_attention(q, k, v, scale, mask)
            theirs = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
            ref = reference(q, k, v, scale, mask, mx)
            mx.eval(ours, theirs, ref)
        except Exception as e:  # a compile error shows here, once
            line["error"] = f"{type(e).__name__}: {e}"[:2000]
            failed += 1
            emit(line, args.out)
            continue
        err_ours = mx.abs(ours.astype(mx.float32) - ref).max().item()
        err_mlx = mx.abs(theirs.astype(mx.float32) - ref).max().item()
        line.update(max_err_kernel=round(err_ours, 6), max_err_mlx=round(err_mlx, 6))
        # The kernel may round differently, never much worse than MLX's own. In float32
        # the reference and MLX's attention are made of MLX's CUDA matmuls, which round
        # through TF32 (10-bit mantissa), so MLX can match the reference exactly while
        # the kernel's plain float32 FMAs land ~1e-4 away (the first H100 run).
        bound = max(2 * err_mlx, 5e-4 if case[7] == "float32" else 2e-2)
        line["ok"] = bool(err_ours <= bound) and ours.shape == theirs.shape
        failed += not line["ok"]
        ks = [(k + 0.001 * i, v) for i in range(layers)]  # one layer's keys each
        mx.eval(ks)
        line["kernel_ms"] = time_kernel(q, ks, scale, mask, args.repeats, mx)
        line["mlx_ms"] = time_mlx(q, ks, scale, mask, args.repeats, mx)
        line["speedup"] = round(line["mlx_ms"] / line["kernel_ms"], 2)
        flags = ("PAIRED_LOADS", "PREFETCH_NEXT_KEY", "KEY_BATCH", "LANE_KEYS")
        defaults = [getattr(attention_kernel, f) for f in flags]
        line["variants"] = {}
        for name in [x for x in args.variants.split(",") if x]:
            set_variant(name)
            try:
                other = kernel_attention(q, k, v, scale, mask)
                err = mx.abs(other.astype(mx.float32) - ref).max().item()
                ms = time_kernel(q, ks, scale, mask, args.repeats, mx)
                line["variants"][name] = {"ms": ms, "max_err": round(err, 6)}
                line["variants"][name]["ok"] = bool(err <= bound)
                if err > bound:
                    line["ok"], failed = False, failed + 1
            except Exception as e:  # a compile error of the candidate
                line["variants"][name] = {"error": f"{type(e).__name__}: {e}"[:500]}
                failed += 1
            finally:
                for flag, value in zip(flags, defaults, strict=True):
                    setattr(attention_kernel, flag, value)
        emit(line, args.out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

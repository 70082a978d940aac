"""A forward pass of a few rows, plain against row-gemv linears and row attention
(omlx/mlx_lm_compat/row_gemv.py, row_attention.py).

    python -m benchmarks.row_gemv_probe [--model DIR] [--rows 1,2,4,8,16,32]
        [--context 300] [--reps 30] [--dtypes float32,bfloat16,q4] [--out FILE]
        [--layouts as_loaded,linears,row_gemv,kernel,device,compiled] [--kernels]

The default model's shape (or a model folder's, with --model) with random weights, a KV
cache of --context tokens, then forward passes of R new tokens (a DFlash verify is 16):
each timed to the end of its evaluation, the median of --reps, with the linears as
loaded and swapped. On CUDA the question is whether the host's cuBLASLt captures per
matmul, not the GPU, bound the pass: swapped, a 16-row pass should cost about what a
one-row pass does. Also reports the largest difference of the logits between the two.
Layouts: `as_loaded`; `linears`, the linears swapped; `row_gemv`, the linears and the
few-query attention (what engine.row_gemv does). dtype `q4`: the linears and embedding
quantized to 4 bits in groups of 32 with float16 activations, as `omlx serve` keeps the
default model's Q4_1 blocks on a GPU (no float linear to swap; `row_gemv` is then the
attention alone); `kernel` (CUDA only), the linears swapped and the attention of 1-16
queries as omlx's own CUDA kernel (attention_kernel.py: one launch a layer, where row
attention is several); `device`, `kernel` (row attention off CUDA) over device-length
caches (omlx/draft/device_cache.py), and `compiled`, that pass as one mx.compile'd graph
(`build_ms`: the host's time to return a pass's graph, before its evaluation).
`--kernels`: the device's kernel time and the CUDA API calls per pass (PyTorch's
profiler, as decode_step_anatomy.py) beside the wall time: captures
(cudaStreamBeginCapture) are the cuBLASLt / cuDNN calls the layouts remove. One JSON line
per dtype, rows and layout.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SMOLLM2 = {
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "vocab_size": 49152,
    "rope_theta": 100000,
    "tie_word_embeddings": True,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="a model folder: its config.json's shape")
    ap.add_argument("--rows", default="1,2,4,8,16,32")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--layouts", default="as_loaded,row_gemv")
    ap.add_argument("--kernels", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.models import llama
    from mlx_lm.models.cache import make_prompt_cache

    from benchmarks.decode_step_anatomy import KernelClock
    from omlx.mlx_lm_compat.attention_kernel import restore_kernel_attention
    from omlx.mlx_lm_compat.row_attention import restore_all_row_attention
    from omlx.mlx_lm_compat.row_gemv import RowGemvLinear, use_row_gemv

    config = SMOLLM2
    if args.model:
        config = json.loads((Path(args.model) / "config.json").read_text())
    rows_list = [int(r) for r in args.rows.split(",")]
    layouts = args.layouts.split(",")
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    for dtype_name in args.dtypes.split(","):
        quantized = dtype_name == "q4"
        dtype = mx.float16 if quantized else getattr(mx, dtype_name)
        mx.random.seed(0)
        model = llama.Model(llama.ModelArgs.from_dict(config))
        model.update(tree_map(lambda p, d=dtype: p.astype(d), model.parameters()))
        if quantized:
            import mlx.nn as nn

            nn.quantize(model, group_size=32, bits=4)
        mx.eval(model.parameters())
        restore_all_row_attention()  # the patches are per module: the last dtype's stay
        restore_kernel_attention(model)
        prompt = mx.random.randint(0, config["vocab_size"], (1, args.context))
        logits_by_layout: dict[tuple[str, int], mx.array] = {}
        for layout in layouts:
            if layout == "linears":
                use_row_gemv(model, attention=False)
            elif layout == "row_gemv":
                use_row_gemv(model)
            elif layout == "kernel":
                if not mx.cuda.is_available():
                    print(f"layout {layout}: CUDA only, skipped", file=sys.stderr)
                    continue
                from omlx.mlx_lm_compat.attention_kernel import use_kernel_attention

                restore_all_row_attention()
                use_row_gemv(model, attention=False)
                use_kernel_attention(model)
            elif layout in ("device", "compiled"):
                # `kernel` (row attention off CUDA) over device-length caches, whose
                # shapes repeat, so the pass can be one mx.compile'd graph
                restore_all_row_attention()
                use_row_gemv(model, attention=not mx.cuda.is_available())
                if mx.cuda.is_available():
                    from omlx.mlx_lm_compat.attention_kernel import use_kernel_attention

                    use_kernel_attention(model)
            swapped = sum(isinstance(m, RowGemvLinear) for _, m in model.named_modules())
            for rows in rows_list:
                cache = make_prompt_cache(model)
                mx.eval(model(prompt, cache=cache))
                vocab = config["vocab_size"]
                tokens = mx.random.randint(0, vocab, (1, rows), key=mx.random.key(rows))
                forward = _pass(model, cache, args.context, layout)
                times, build = [], []
                clock = KernelClock(args.kernels)
                for i in range(args.reps + 3):
                    if i == 3:
                        clock.start()
                    t0 = time.perf_counter()
                    logits = forward(tokens)
                    t1 = time.perf_counter()
                    mx.eval(logits)
                    if i >= 3:
                        times.append(time.perf_counter() - t0)
                        build.append(t1 - t0)
                clock.stop()
                logits_by_layout[(layout, rows)] = logits
                diff = None
                if layout != layouts[0]:
                    ref = logits_by_layout[(layouts[0], rows)]
                    diff = mx.abs(logits.astype(mx.float32) - ref.astype(mx.float32)).max().item()
                line = {
                    "bench": "row_gemv_probe",
                    "dtype": dtype_name,
                    "layout": layout,
                    "swapped": swapped,
                    "rows": rows,
                    "context": args.context,
                    "ms": round(statistics.median(times) * 1e3, 3),
                    "ms_min": round(min(times) * 1e3, 3),
                    "build_ms": round(statistics.median(build) * 1e3, 3),
                    "max_logit_diff": diff,
                    **clock.summary(args.reps),
                    "device": str(mx.default_device()),
                    "machine": platform.machine(),
                    "command": " ".join(sys.argv),
                }
                print(json.dumps(line), flush=True)
                if out:
                    out.write(json.dumps(line) + "\n")
    if out:
        out.close()


def _pass(model: Any, cache: list[Any], context: int, layout: str) -> Callable[[Any], Any]:
    """tokens -> logits, each pass over the same `context` cached tokens. `device` and
    `compiled` move the cache to device-length buffers (omlx/draft/device_cache.py);
    `compiled` runs the pass as one mx.compile'd function of the tokens, the length and
    the buffers (one trace per bucket width: its shapes repeat)."""
    if layout not in ("device", "compiled"):

        def plain(tokens: Any) -> Any:
            for c in cache:  # the same context length every pass
                c.offset = context
            return model(tokens, cache=cache)

        return plain
    import mlx.core as mx

    from omlx.draft.device_cache import DeviceOffsetKVCache

    layers, length = DeviceOffsetKVCache.from_caches(cache)
    start = length.offset

    def traced(tokens: Any, offset: Any, buffers: list[Any]) -> tuple[Any, list[Any]]:
        length.place(offset, context)
        for i, c in enumerate(layers):
            c.keys, c.values = buffers[2 * i], buffers[2 * i + 1]
        logits = model(tokens, cache=layers)
        return logits, [a for c in layers for a in (c.keys, c.values)]

    compiled: dict[tuple[int, ...], Any] = {}

    def device_pass(tokens: Any) -> Any:
        # from_caches left room for the block (buffers of 1,024 positions at least), so
        # no pass, traced or not, grows them
        length.place(start, context)
        if layout == "device":
            return model(tokens, cache=layers)
        key = (length.width(tokens.shape[1]), tokens.shape[1], layers[0].keys.shape[2])
        fn = compiled.get(key)
        if fn is None:  # a new function object: mx.compile keys its traces on it
            fn = compiled[key] = mx.compile(lambda *a: traced(*a))
        logits, buffers = fn(tokens, start, [a for c in layers for a in (c.keys, c.values)])
        for i, c in enumerate(layers):
            c.keys, c.values = buffers[2 * i], buffers[2 * i + 1]
        return logits

    return device_pass


if __name__ == "__main__":
    main()

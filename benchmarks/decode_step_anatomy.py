"""Where a batched decode step's time goes: graph building, dispatch, device wait.

    python benchmarks/decode_step_anatomy.py [--shape qwen3-8b] [--dtype bfloat16]
        [--batches 1,8,64,128,256] [--prompt 200] [--steps 48] [--paths ...]
        [--out FILE] [--smoke]

A random-weight Qwen3 of a real shape (dflash_bench.build_target), or with --model a
real model folder (the default model: what DFlash data generation decodes at 256 rows).
At each batch size B,
B random prompts of --prompt tokens are prefilled together, then --steps greedy decode
steps are timed after a few warm-up steps. Paths:

- generator: mlx-lm's BatchGenerator.next() (what omlx's engine runs, per-row logprobs,
  Response objects and stop matching included);
- fused: omlx's FusedJoinBatchGenerator.next();
- fused_bias: the same with every row banning two tokens through logit_bias (omlx's
  LogitBias processor, as the serving benchmarks send);
- fused_sampled: fused_bias sampled at temperature 1 (omlx's shared sampler), as an HTTP
  request that sets no temperature;
- fused_ragged: fused_sampled with prompt lengths spread over +-8 tokens (left padding);
- fused_bias_norm, fused_sampled_norm: fused_bias and fused_sampled with the logits
  normalised every step, as before omlx's samplers took raw logits (batch_join's
  `takes_logits`): what the skipped log-softmax saved;
- loop: a bare pipelined loop over mlx-lm's model and BatchKVCache (argmax only): the
  step graph is built, queued with async_eval, then the previous step's tokens are read;
- loop_nomask: the same with no attention mask (every prompt has the same length here,
  so none is needed): on CUDA that is MLX's fused vector attention, which takes no array
  mask, against the composed fallback that BatchKVCache's array mask forces;
- loop_folded: `loop` with omlx's folded attention (`engine.decode_attention = "folded"`,
  omlx/mlx_lm_compat/decode_attention.py): the masked one-query attention as two plain
  batched matmuls, the GQA group folded into the query rows;
- loop_kernel: `loop` with omlx's attention kernel (`engine.decode_attention = "kernel"`,
  omlx/mlx_lm_compat/attention_kernel.py, CUDA only): one custom kernel a layer;
- static: the same loop over a fixed-capacity cache (one slice_update per layer at a
  position held in an array, a mask built from it), so every step has the same shapes;
- compiled: `static` under mx.compile: one traced graph replayed every step.

For the loops each step is split into build (Python builds the graph), dispatch
(async_eval hands it to the device) and wait (reading the previous step's tokens: the
host had nothing left to do but wait for the device). A step whose wait is near zero is
host-bound. One JSON line per path and batch size (--out appends).

--kernels (CUDA, with PyTorch importable, as on the lent GPU) records the device's own
kernel activity over the timed steps through PyTorch's profiler (CUPTI sees every kernel
in the process, MLX's included) and adds per step: the kernels launched, the sum of
their durations and the time at least one ran (gpu_busy_ms). A step whose gpu_busy_ms is
near its step_ms is bound by the device; one far below it, by the host (a wait inside
async_eval would otherwise pass for host work).

Where nvidia-smi runs, each line also names the GPU (`gpu`) and says what it was doing
over the timed steps (`gpu_state`: clocks, power, throttle reasons, other processes;
benchmarks/gpu_state.py): the same step has measured 13 ms in one run and 22 ms in another.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from gpu_state import GpuSampler, gpu_identity

PATHS = (
    "generator",
    "fused",
    "fused_bias",
    "fused_sampled",
    "fused_ragged",
    "fused_bias_norm",
    "fused_sampled_norm",
    "loop",
    "loop_nomask",
    "loop_folded",
    "loop_kernel",
    "static",
    "compiled",
)


class StaticKV:
    """One layer's cache inside a step over fixed-capacity buffers (B, heads, C, dim)."""

    def __init__(self, keys, values, offset, pos, mask) -> None:
        self.keys, self.values = keys, values
        self.offset, self.pos, self.mask = offset, pos, mask

    def update_and_fetch(self, keys, values):
        import mlx.core as mx

        self.keys = mx.slice_update(self.keys, keys, self.pos, axes=(2,))
        self.values = mx.slice_update(self.values, values, self.pos, axes=(2,))
        return self.keys, self.values

    def make_mask(self, n, return_array=False, window_size=None):
        return self.mask


def static_step(model, num_layers: int):
    """step(tokens (B,), pos (1,), left (B,), *kv) -> (next tokens, *kv')."""
    import mlx.core as mx

    def step(tokens, pos, left, *kv):
        cols = mx.arange(kv[0].shape[2])
        mask = ((cols[None] >= left[:, None]) & (cols[None] <= pos))[:, None, None, :]
        offset = pos - left
        caches = [StaticKV(kv[2 * i], kv[2 * i + 1], offset, pos, mask) for i in range(num_layers)]
        logits = model(tokens[:, None], cache=caches)[:, -1, :]
        out = [mx.argmax(logits, axis=-1)]
        for c in caches:
            out += [c.keys, c.values]
        return tuple(out)

    return step


class KernelClock:
    """The device's kernel activity between start() and stop(), via PyTorch's profiler."""

    def __init__(self, enabled: bool) -> None:
        self._prof = None
        self.kernels: list[tuple[str, float, float]] = []  # (name, start_us, end_us)
        # CUDA runtime/driver calls CUPTI saw on the host (cudaGraphInstantiate against
        # cudaGraphExecUpdate tells whether MLX rebuilds its CUDA graphs every step)
        self.api_calls: list[tuple[str, float]] = []  # (name, duration_us)
        if not enabled:
            return
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile
        except ImportError:
            print("--kernels: PyTorch is not importable; no kernel times", file=sys.stderr)
            return
        if torch.cuda.is_available():
            self._prof = profile(activities=[ProfilerActivity.CUDA])

    # Untried on the lent GPU so far: a profiler that fails records why and the timed
    # steps go on without it, so one device call still brings the step times back.
    error = ""

    def start(self) -> None:
        if self._prof is not None:
            try:
                self._prof.__enter__()
            except Exception as e:
                self.error, self._prof = f"start: {e!r}"[:300], None

    def stop(self) -> None:
        if self._prof is None:
            return
        try:
            self._prof.__exit__(None, None, None)
            for e in self._prof.events():
                if e.device_type.name == "CUDA":
                    self.kernels.append((e.name, e.time_range.start, e.time_range.end))
                elif e.name.startswith("cu"):
                    self.api_calls.append((e.name, e.time_range.end - e.time_range.start))
        except Exception as e:
            self.error = f"stop: {e!r}"[:300]

    def summary(self, steps: int) -> dict:
        if self.error:
            return {"kernels_error": self.error}
        if not self.kernels:
            return {}
        busy, end = 0.0, float("-inf")
        for _, a, b in sorted(self.kernels, key=lambda k: k[1]):
            busy += max(0.0, b - max(a, end))
            end = max(end, b)
        by_name: dict[str, float] = {}
        for name, a, b in self.kernels:
            by_name[name] = by_name.get(name, 0.0) + b - a
        top = sorted(by_name.items(), key=lambda kv: -kv[1])[:6]
        return {
            "kernels_per_step": round(len(self.kernels) / steps, 1),
            "gpu_sum_ms": round(sum(b - a for _, a, b in self.kernels) / steps / 1000, 3),
            "gpu_busy_ms": round(busy / steps / 1000, 3),
            "top_kernels_ms": {n[:80]: round(t / steps / 1000, 3) for n, t in top},
            **api_summary(self.api_calls, steps),
        }


def api_summary(calls: list[tuple[str, float]], steps: int) -> dict:
    """Per step: how often each CUDA API call ran and its host time (the top ten by time)."""
    if not calls:
        return {}
    count: dict[str, int] = {}
    spent: dict[str, float] = {}
    for name, us in calls:
        count[name] = count.get(name, 0) + 1
        spent[name] = spent.get(name, 0.0) + us
    top = sorted(spent, key=lambda n: -spent[n])[:10]
    return {
        "api_calls_per_step": {n: round(count[n] / steps, 2) for n in top},
        "api_ms_per_step": {n: round(spent[n] / steps / 1000, 3) for n in top},
        "api_total_ms_per_step": round(sum(spent.values()) / steps / 1000, 3),
    }


class ThreadCpu:
    """This thread's CPU time over the timed steps against their wall time: equal when the
    host works (or spins on the GPU) throughout, lower when it sleeps in a wait."""

    def __init__(self) -> None:
        self.cpu = self.wall = 0.0

    def start(self) -> None:
        self.cpu, self.wall = time.thread_time(), time.perf_counter()

    def stop(self) -> None:
        self.cpu, self.wall = time.thread_time() - self.cpu, time.perf_counter() - self.wall

    def summary(self, steps: int) -> dict:
        return {
            "thread_cpu_ms_per_step": round(1000 * self.cpu / steps, 2),
            "wall_ms_per_step": round(1000 * self.wall / steps, 2),
        }


class Watches:
    """Everything started and stopped around the timed steps, as one clock."""

    def __init__(self, *clocks) -> None:
        self.clocks = clocks

    def start(self) -> None:
        for clock in self.clocks:
            clock.start()

    def stop(self) -> None:
        for clock in reversed(self.clocks):
            clock.stop()


def prefill(model, prompts):
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache

    cache = [BatchKVCache([0] * len(prompts)) for _ in model.layers]
    tokens = mx.argmax(model(mx.array(prompts), cache=cache)[:, -1, :], axis=-1)
    mx.eval(tokens)
    return tokens, cache


@contextlib.contextmanager
def attention_variant(model, kind):
    """loop_folded / loop_kernel: the batched one-query steps take omlx's folded
    attention or its attention kernel (`engine.decode_attention`)."""
    from omlx.mlx_lm_compat.attention_kernel import (
        restore_kernel_attention,
        use_kernel_attention,
    )
    from omlx.mlx_lm_compat.decode_attention import (
        restore_decode_attention,
        use_folded_decode_attention,
    )

    if kind == "loop_folded":
        use_folded_decode_attention(model)
    elif kind == "loop_kernel":
        use_kernel_attention(model)
    try:
        yield
    finally:
        restore_decode_attention(model)
        restore_kernel_attention(model)


def loop_path(model, prompts, steps, warm, kind, clock):
    """Per-step (build, dispatch, wait, total) seconds of a pipelined greedy loop."""
    import mlx.core as mx

    y, cache = prefill(model, prompts)
    n = len(prompts[0])
    if kind == "loop_nomask":
        for c in cache:  # equal prompt lengths: no left padding, nothing to mask
            c.make_mask = lambda n, return_array=False, **kw: None
    if kind not in ("loop", "loop_nomask", "loop_folded", "loop_kernel"):
        cap = -(-(n + steps + warm + 1) // 256) * 256
        kv = []
        for c in cache:
            pad = [(0, 0), (0, 0), (0, cap - n), (0, 0)]
            kv += [mx.pad(c.keys[..., :n, :], pad), mx.pad(c.values[..., :n, :], pad)]
        del cache
        mx.eval(kv)
        left = mx.zeros((len(prompts),), mx.int32)
        fn = static_step(model, len(model.layers))
        if kind == "compiled":
            fn = mx.compile(fn)
    rows = []
    for i in range(steps + warm):
        if i == warm:
            clock.start()
        t0 = time.perf_counter()
        if kind.startswith("loop"):
            with attention_variant(model, kind):
                nxt = mx.argmax(model(y[:, None], cache=cache)[:, -1, :], axis=-1)
            state = [nxt]
        else:
            res = fn(y, mx.array([n + i], mx.int32), left, *kv)
            nxt, kv = res[0], list(res[1:])
            state = [nxt, kv]
        t1 = time.perf_counter()
        mx.async_eval(*state)
        t2 = time.perf_counter()
        y.tolist()
        t3 = time.perf_counter()
        y = nxt
        if i >= warm:
            rows.append((t1 - t0, t2 - t1, t3 - t2, t3 - t0))
    clock.stop()
    return rows


def generator_path(model, prompts, steps, warm, kind, clock):
    import mlx.core as mx

    from omlx.engine.api import SamplingParams
    from omlx.engine.sampling import make_logits_processors, make_sampler

    if kind.startswith("fused"):
        from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator as cls
    else:
        from mlx_lm.generate import BatchGenerator as cls
    gen = cls(model, stream=mx.new_stream(mx.default_device()), prefill_batch_size=len(prompts))
    extra = {}
    if kind != "fused" and kind.startswith("fused"):
        params = SamplingParams(temperature=0.0, logit_bias={0: -100.0, 1: -100.0})
        if not kind.startswith("fused_bias"):
            params = SamplingParams(temperature=1.0, logit_bias=params.logit_bias)
        vocab = model.args.vocab_size
        sampler = make_sampler(params, vocab)
        if kind.endswith("_norm"):  # unmarked, so the batch normalises (one shared object)
            sampler = (lambda inner: lambda x: inner(x))(sampler)
        extra["samplers"] = [sampler for _ in prompts]
        extra["logits_processors"] = [make_logits_processors(params, 0) for _ in prompts]
    if kind == "fused_ragged":
        prompts = [p[: len(p) - (i * 7) % 17] for i, p in enumerate(prompts)]
    try:
        gen.insert(prompts, max_tokens=[steps + warm + 8] * len(prompts), **extra)
        # Prefill and joins first: time only steps where every row decodes.
        while len(gen.next()[1]) < len(prompts):
            pass
        rows = []
        for i in range(steps + warm):
            if i == warm:
                clock.start()
            t0 = time.perf_counter()
            gen.next()
            if i >= warm:
                rows.append((0.0, 0.0, 0.0, time.perf_counter() - t0))
        clock.stop()
        return rows
    finally:
        gen.close()


def summary(rows, batch: int) -> dict:
    med = [statistics.median(col) * 1000 for col in zip(*rows, strict=True)]
    return {
        "build_ms": round(med[0], 2),
        "dispatch_ms": round(med[1], 2),
        "wait_ms": round(med[2], 2),
        "step_ms": round(med[3], 2),
        "step_mean_ms": round(statistics.fmean(r[3] for r in rows) * 1000, 2),
        "step_max_ms": round(max(r[3] for r in rows) * 1000, 2),
        "tok_s": round(batch / statistics.fmean(r[3] for r in rows), 1),
    }


CUDA_SYNC_FLAGS = {"spin": 0x1, "yield": 0x2, "blocking": 0x4}


def set_cuda_sync(mode: str) -> str:
    """Set device 0's primary-context scheduling flag through the driver API before MLX
    creates the context; what was done ("auto": nothing; an error string if it failed)."""
    if mode == "auto":
        return mode
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        if cuda.cuInit(0) != 0:
            return f"{mode}: cuInit failed"
        rc = cuda.cuDevicePrimaryCtxSetFlags(0, CUDA_SYNC_FLAGS[mode])
    except OSError as e:
        return f"{mode}: {e}"[:200]
    return mode if rc == 0 else f"{mode}: cuDevicePrimaryCtxSetFlags returned {rc}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--model", default="", help="a model folder instead of a random shape")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batches", default="1,8,64,128,256")
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument(
        "--layouts",
        default="mlx",
        help="weights as loaded (mlx), sibling projections fused (fused), input-major "
        "linears as omlx's engine keeps them on a CPU (input_major), or both "
        "(input_major_fused), or quantized to 4 or 8 bits, groups of 64 (q4, q8; fused "
        "first with q4_fused, q8_fused); each a fresh model, one after the other",
    )
    ap.add_argument(
        "--cuda-sync",
        choices=("auto", "spin", "yield", "blocking"),
        default="auto",
        help="how the host waits for the GPU (the CUDA context's scheduling flag, set "
        "before MLX starts): whether a wait shows up as the thread's CPU time",
    )
    ap.add_argument("--label", default="", help="a name for this run's lines")
    ap.add_argument("--out", default="")
    ap.add_argument("--smoke", action="store_true", help="tiny shape, small batches")
    ap.add_argument("--kernels", action="store_true", help="device kernel time (CUDA)")
    args = ap.parse_args()
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()  # the BLAS `omlx serve` runs on; a no-op on CUDA
    args.cuda_sync = set_cuda_sync(args.cuda_sync)
    if args.smoke:
        args.shape, args.dtype, args.batches = "tiny", "float32", "1,4"
        args.steps, args.prompt = 6, 16

    import mlx.core as mx

    paths = args.paths.split(",")
    identity = gpu_identity()  # which card, its driver, clocks and power limit
    with GpuSampler() as sampler:
        for layout in args.layouts.split(","):
            model, vocab = load_model(args, layout)
            measure(args, model, vocab, layout, paths, identity, sampler)
            del model
            mx.clear_cache()


def load_model(args: argparse.Namespace, layout: str) -> tuple[object, int]:
    """The model with its weights laid out as `layout` says (see --layouts)."""
    import mlx.core as mx

    if args.model:  # a real model folder (e.g. the default model, as data generation runs it)
        from mlx_lm import load

        model, _ = load(args.model)
        vocab = int(model.args.vocab_size)
        args.shape, args.dtype = Path(args.model).name, str(model.model.embed_tokens.weight.dtype)
    else:
        from dflash_bench import SHAPES, build_target

        mx.random.seed(0)  # the same weights for every layout
        model = build_target(args.shape, getattr(mx, args.dtype))
        vocab = SHAPES[args.shape]["vocab_size"]
    if "fused" in layout:
        from omlx.mlx_lm_compat.fused_projections import fuse_projections

        fuse_projections(model)
    if layout.startswith("input_major"):
        from omlx.platform.weight_layout import use_input_major_linears

        use_input_major_linears(model)
    if layout.startswith(("q4", "q8")):
        # On CUDA a quantized matmul of several rows is MLX's own kernel, recorded as a
        # graph kernel node, where a float one is a cuBLASLt call captured into a child
        # graph (the host cost per matmul that the 64-row step is bound by).
        import mlx.nn as nn

        nn.quantize(model, group_size=64, bits=int(layout[1]))
        mx.eval(model.parameters())
    return model, vocab


def measure(args, model, vocab, layout, paths, identity, sampler) -> None:
    """Every path at every batch size on one model; one JSON line each."""
    import mlx.core as mx

    for batch in (int(b) for b in args.batches.split(",")):
        mx.random.seed(batch)
        prompts = mx.random.randint(0, vocab, (batch, args.prompt)).tolist()
        for path in paths:
            kernels, gpu, cpu = KernelClock(args.kernels), sampler.window(), ThreadCpu()
            clock = Watches(kernels, gpu, cpu)  # all watch the timed steps only
            if path in ("generator",) or path.startswith("fused"):
                rows = generator_path(model, prompts, args.steps, args.warm, path, clock)
            else:
                rows = loop_path(model, prompts, args.steps, args.warm, path, clock)
            line = {
                "bench": "decode_step_anatomy",
                "label": args.label,
                "pid": os.getpid(),
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "machine": f"{platform.machine()}",
                "device": str(mx.default_device()),
                **({"gpu": identity} if identity is not None else {}),
                "shape": args.shape,
                "dtype": args.dtype,
                "path": path,
                "layout": layout,
                "mlx_env": {k: v for k, v in os.environ.items() if k.startswith("MLX_")},
                "cuda_sync": args.cuda_sync,
                "batch": batch,
                "prompt": args.prompt,
                "steps": args.steps,
                **summary(rows, batch),
                **kernels.summary(args.steps),
                **cpu.summary(args.steps),
            }
            gpu_state = gpu.state()
            if gpu_state is not None:
                line["gpu_state"] = gpu_state
            print(json.dumps(line), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(line) + "\n")
            mx.clear_cache()


if __name__ == "__main__":
    main()

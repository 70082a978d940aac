"""Serving at scale: aggregate decode across concurrent streams, bare generator to HTTP.

    python benchmarks/serving_scale.py [--shape qwen3-8b] [--dtype bfloat16]
        [--tokenizer DIR] [--levels 1,8,32,64,128,256] [--tokens 128] [--prompt-words 155]
        [--paths bare,engine,omlx_http,mlx_lm_http] [--trace] [--label NAME]
        [--py-spy BIN --profile-level N] [--budget-s S] [--workdir DIR] [--smoke] [--out FILE]

The model is serving_overhead.py's: random weights of a real shape, the default model's
tokenizer. At each level N, N distinct chat prompts (~200 tokens) start at once and each
generates --tokens tokens; one request per stream. Four paths, one after the other (one
copy of the weights in memory at a time):

- bare: mlx-lm's BatchGenerator on this thread, every prompt inserted at once, no stop
  tokens (what the generator can do; omlx must approach it); at one stream also
  `bare_loop`, mlx-lm's plain generate_step (no batch, no mask);
- engine: omlx's LocalModelPool.generate in process (no HTTP), EOS banned by logit_bias;
- omlx_http: `omlx serve` streamed over loopback, EOS banned by logit_bias;
- mlx_lm_http: `mlx_lm.server` likewise (`--decode-concurrency`, `--prompt-concurrency`).

Per level: aggregate tok/s (all generated tokens / wall time from the first request to
the last token, prefill included), TTFT p50/p95, inter-token gap p50/p95, dropped
requests (failed, or fewer tokens than asked). A path may list its own levels:
`--paths bare,mlx_lm_http:32/64/128`.

With --trace the omlx paths run with `engine.step_trace` (omlx/engine/step_trace.py) and
each level gets a step breakdown: engine steps/s, the step split into the generator's
synchronising eval (GPU-bound wait) and host work, publish/hand-off time, how late the
event loop ran hand-offs, admission waits, and CPU time per generated token of the
engine thread and of the event-loop thread (read from /proc, Linux only).

One JSON line per path and level (--out appends them as they finish, so a run cut short
keeps what it measured); --budget-s skips what would start after that many seconds.
Where nvidia-smi runs, every line also names the GPU (`gpu`) and says what it was doing
while the level ran (`gpu_state`: clocks, power, throttle reasons, other processes;
benchmarks/gpu_state.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from gpu_state import GpuSampler, GpuWindow, gpu_identity
from trace_window import TraceWindow, rounded

from omlx.loadgen.client import filler_prompt
from omlx.loadgen.percentiles import percentile

PATHS = ("bare", "engine", "omlx_http", "mlx_lm_http")


@dataclass(slots=True)
class Stream:
    """One request's client-side timeline (perf_counter seconds)."""

    start_s: float
    token_times_s: list[float] = field(default_factory=list)
    num_tokens: int = 0
    error: str = ""


def summarise(streams: list[Stream], wall_s: float, want: int) -> dict:
    ok = [s for s in streams if not s.error and s.num_tokens >= want]
    ttfts = [s.token_times_s[0] - s.start_s for s in ok if s.token_times_s]
    gaps = [(b - a) * 1000 for s in ok for a, b in itertools.pairwise(s.token_times_s)]
    tokens = sum(s.num_tokens for s in streams if not s.error)
    return {
        "wall_s": round(wall_s, 3),
        "tokens": tokens,
        "aggregate_tps": round(tokens / wall_s, 1) if wall_s > 0 else 0.0,
        "ttft_p50_s": rounded(percentile(ttfts, 50), 3),
        "ttft_p95_s": rounded(percentile(ttfts, 95), 3),
        "itl_p50_ms": rounded(percentile(gaps, 50), 2),
        "itl_p95_ms": rounded(percentile(gaps, 95), 2),
        "dropped": len(streams) - len(ok),
        "errors": sorted({s.error for s in streams if s.error})[:3],
    }


def prompt_text(i: int, words: int, salt: int) -> str:
    return filler_prompt(words, salt=salt * 100_000 + i)


# -- bare ----------------------------------------------------------------------------------


def bare_level(model, tok, n: int, words: int, max_tokens: int, salt: int) -> dict:
    """mlx-lm's BatchGenerator: all n prompts inserted at once, run until each is done."""
    from mlx_lm.generate import BatchGenerator

    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": prompt_text(i, words, salt)}],
            add_generation_prompt=True,
        )
        for i in range(n)
    ]
    gen = BatchGenerator(model, completion_batch_size=max(n, 1))
    start = time.perf_counter()
    uids = gen.insert(prompts, [max_tokens] * n)
    streams = {uid: Stream(start) for uid in uids}
    left = n
    steps = 0
    while left:
        _, responses = gen.next()
        steps += 1
        now = time.perf_counter()
        for r in responses:
            s = streams[r.uid]
            s.token_times_s.append(now)
            s.num_tokens += 1
            if r.finish_reason is not None:
                left -= 1
    wall = time.perf_counter() - start
    gen.close()
    out = summarise(list(streams.values()), wall, max_tokens)
    out["prompt_tokens"] = round(sum(map(len, prompts)) / n)
    out["steps"] = steps
    return out


def bare_loop_level(model, tok, words: int, max_tokens: int, salt: int) -> dict:
    """One stream through mlx-lm's plain generate_step: the batch-1 bare loop."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    prompt = tok.apply_chat_template(
        [{"role": "user", "content": prompt_text(0, words, salt)}], add_generation_prompt=True
    )
    start = time.perf_counter()
    stream = Stream(start)
    for _ in generate_step(mx.array(prompt), model, max_tokens=max_tokens):
        stream.token_times_s.append(time.perf_counter())
        stream.num_tokens += 1
    out = summarise([stream], time.perf_counter() - start, max_tokens)
    out["prompt_tokens"] = len(prompt)
    return out


# -- engine in process ---------------------------------------------------------------------


async def engine_level(pool, n: int, words: int, max_tokens: int, salt: int, eos) -> dict:
    from omlx.engine.api import (
        ChatMessage,
        Done,
        Failed,
        GenerationRequest,
        RequestId,
        SamplingParams,
        Token,
    )

    sampling = SamplingParams(temperature=0, logit_bias={t: -100.0 for t in eos})

    async def one(i: int, s: Stream) -> None:
        req = GenerationRequest(
            request_id=RequestId(f"scale-{salt}-{i}"),
            model="m",
            max_tokens=max_tokens,
            messages=[ChatMessage("user", prompt_text(i, words, salt))],
            sampling=sampling,
        )
        try:
            async for event in pool.generate(req):
                if isinstance(event, Token) and event.token_ids:
                    s.token_times_s.append(time.perf_counter())
                    s.num_tokens += len(event.token_ids)
                elif isinstance(event, Failed):
                    s.error = f"{type(event.error).__name__}: {event.error}"
                elif isinstance(event, Done):
                    break
        except Exception as e:  # a dropped request is a result here
            s.error = f"{type(e).__name__}: {e}"

    start = time.perf_counter()
    streams = [Stream(start) for _ in range(n)]
    await asyncio.gather(*(one(i, s) for i, s in enumerate(streams)))
    return summarise(streams, time.perf_counter() - start, max_tokens)


# -- HTTP ------------------------------------------------------------------------------------


async def http_level(
    base: str, model: str, n: int, words: int, max_tokens: int, salt: int, eos
) -> dict:
    import httpx

    from omlx.loadgen.client import RequestTiming, stream_chat

    extra = {"logit_bias": {str(t): -100 for t in eos}}
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600), limits=limits) as client:

        async def one(i: int) -> Stream:
            t = RequestTiming(ok=False, start_s=time.perf_counter())
            await stream_chat(
                client,
                base,
                model,
                prompt_text(i, words, salt),
                max_tokens,
                extra=extra,
                timing=t,
            )
            s = Stream(t.start_s, t.chunk_times_s, t.completion_tokens)
            if not t.ok:
                s.error = t.error or "failed"
            return s

        start = time.perf_counter()
        streams = await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - start
    # Every stream started within the gather's first moments; wall covers them all.
    return summarise(list(streams), wall, max_tokens)


# -- driving the paths ---------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    model_dir: Path
    work: Path
    levels: dict[str, list[int]]
    words: int
    tokens: int
    trace: bool
    deadline: float
    emit: object  # callable(record)
    peer_args: list[str]
    max_running: int
    gpu: GpuSampler  # a no-op without nvidia-smi
    label: str = ""
    py_spy: str = ""
    profile_level: int = 64

    def left(self) -> bool:
        return time.monotonic() < self.deadline

    def measure(self, path: str, n: int, result: dict, gpu: GpuWindow) -> None:
        """Emit one level's line with what the GPU was doing while it ran."""
        gpu_state = gpu.state()
        if gpu_state is not None:
            result["gpu_state"] = gpu_state
        self.emit({"path": path, "streams": n, **result})


def eos_ids(model_dir: Path) -> list[int]:
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    return sorted(load_tokenizer(model_dir).eos_token_ids)


def run_bare(run: Run) -> None:
    import mlx.core as mx
    from mlx_lm import load

    model, tok = load(str(run.model_dir))
    bare_level(model, tok, 2, run.words, 8, salt=999)  # warm-up: compile, first paths
    for i, n in enumerate(run.levels["bare"]):
        if not run.left():
            break
        with run.gpu.window() as gpu:
            result = bare_level(model, tok, n, run.words, run.tokens, salt=10 + i)
        run.measure("bare", n, result, gpu)
        if n == 1:  # one stream also through the plain loop (no batch, no mask)
            with run.gpu.window() as gpu:
                result = bare_loop_level(model, tok, run.words, run.tokens, salt=10 + i)
            run.measure("bare_loop", 1, result, gpu)
    del model, tok
    gc.collect()
    mx.clear_cache()


async def run_engine(run: Run) -> None:
    import msgspec

    from omlx.pool.pool import LocalModelPool
    from omlx.settings import Settings

    settings = Settings()
    engine = {"max_running": run.max_running}
    trace_path = run.work / "trace-engine.jsonl"
    if run.trace:
        engine["step_trace"] = str(trace_path)
    settings = msgspec.structs.replace(
        settings, engine=msgspec.structs.replace(settings.engine, **engine)
    )
    eos = eos_ids(run.model_dir)
    pool = LocalModelPool(settings, models={"m": run.model_dir})
    try:
        await engine_level(pool, 2, run.words, 8, salt=999, eos=eos)
        for i, n in enumerate(run.levels["engine"]):
            if not run.left():
                break
            window = TraceWindow(trace_path)
            with window, run.gpu.window() as gpu:
                result = await engine_level(pool, n, run.words, run.tokens, 20 + i, eos)
            if run.trace:
                result["breakdown"] = window.breakdown(result["tokens"])
            run.measure("engine", n, result, gpu)
    finally:
        await pool.close()
    import mlx.core as mx

    gc.collect()
    mx.clear_cache()


async def run_http(run: Run, path: str) -> None:
    from omlx.loadgen.server_process import (
        free_port,
        mlx_lm_command,
        omlx_command,
        server_process,
    )

    port = free_port()
    env = dict(os.environ, OMLX_HOME=str(run.work / "omlx-home"))
    trace_path = run.work / "trace-http.jsonl"
    if path == "omlx_http":
        cmd = [*omlx_command(run.model_dir, port), "--max-running", str(run.max_running)]
        name = run.model_dir.name
        if run.trace:
            env["OMLX_ENGINE__STEP_TRACE"] = str(trace_path)
    else:
        cmd = [*mlx_lm_command(run.model_dir, port), *run.peer_args]
        name = "default_model"
    eos = eos_ids(run.model_dir)
    log = run.work / f"{path}.log"
    with server_process(cmd, port, env=env, log_path=log, ready_timeout_s=600) as base:
        await http_level(base, name, 2, run.words, 8, 999, eos)
        for i, n in enumerate(run.levels[path]):
            if not run.left():
                break
            window = TraceWindow(trace_path)
            with window, _profiled(run, path, n, window.pid), run.gpu.window() as gpu:
                result = await http_level(base, name, n, run.words, run.tokens, 30 + i, eos)
            if run.trace and path == "omlx_http":
                result["breakdown"] = window.breakdown(result["tokens"])
            run.measure(path, n, result, gpu)


@contextlib.contextmanager
def _profiled(run: Run, path: str, n: int, pid: int | None):
    """py-spy (raw stacks of every thread) on `omlx serve` during one level, if asked."""
    if not run.py_spy or path != "omlx_http" or n != run.profile_level or pid is None:
        yield
        return
    out = run.work / f"pyspy-{run.label or 'run'}-{n}.txt"
    cmd = [run.py_spy, "record", "-p", str(pid), "-o", str(out), "-f", "raw", "-r", "250",
           "--threads", "--nonblocking"]  # fmt: skip
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    except OSError as e:  # no profiler there: measure without it
        print(f"py-spy not started: {e}", flush=True)
        yield
        return
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def parse_paths(spec: str, levels: list[int]) -> dict[str, list[int]]:
    out = {}
    for item in spec.split(","):
        name, _, own = item.partition(":")
        if name not in PATHS:
            raise SystemExit(f"unknown path {name!r}; choose from {', '.join(PATHS)}")
        out[name] = [int(x) for x in own.split("/")] if own else list(levels)
    return out


def main() -> None:
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()  # the BLAS `omlx serve` runs on; a no-op on CUDA
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape", default="qwen3-8b")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument(
        "--quantize",
        type=int,
        choices=(0, 4, 8),
        default=0,
        help="bits of the random model's weights (groups of 64; 0: none): on CUDA a "
        "quantized matmul is MLX's own kernel, not a captured cuBLASLt call",
    )
    ap.add_argument("--tokenizer", type=Path, help="tokenizer folder (default: default model)")
    ap.add_argument("--levels", default="1,8,32,64,128,256")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt-words", type=int, default=155, help="~200-token chat prompts")
    ap.add_argument("--max-running", type=int, default=256, help="omlx engine.max_running")
    ap.add_argument(
        "--peer-args",
        default="--decode-concurrency 128 --prompt-concurrency 16",
        help="extra mlx_lm.server flags",
    )
    ap.add_argument("--trace", action="store_true", help="step breakdown of the omlx paths")
    ap.add_argument("--label", default="", help="recorded with every line (e.g. before)")
    ap.add_argument("--py-spy", default="", help="py-spy binary: profile omlx serve at a level")
    ap.add_argument("--profile-level", type=int, default=64, help="the level --py-spy records")
    ap.add_argument("--budget-s", type=float, default=1e9, help="start nothing after this")
    ap.add_argument("--workdir", type=Path, help="where the model folder goes (default: tmp)")
    ap.add_argument("--smoke", action="store_true", help="tiny shape, few tokens, small levels")
    ap.add_argument("--out", type=Path, help="append the JSON lines to this file")
    args = ap.parse_args()
    t_start = time.monotonic()
    if args.smoke:
        args.shape, args.dtype = "tiny", "float32"
        args.tokens = 16 if args.tokens == 128 else args.tokens  # --tokens still wins
        if args.levels == "1,8,32,64,128,256":
            args.levels = "1,8"
    if args.tokenizer is None:
        from model_dirs import default_model_dir

        args.tokenizer = default_model_dir()
    import mlx.core as mx
    from serving_overhead import build_model_dir, len_vocab

    from omlx.loadgen.server_process import emit_json_line, run_facts

    work = args.workdir or Path(tempfile.mkdtemp(prefix="omlx-scale-"))
    quantized = f"-q{args.quantize}" if args.quantize else ""
    model_dir = work / f"random-{args.shape}-{args.dtype}{quantized}"
    if args.smoke:
        from dflash_bench import SHAPES

        SHAPES["tiny"] = dict(SHAPES["tiny"], vocab_size=len_vocab(args.tokenizer))
    if not (model_dir / "config.json").exists():
        build_model_dir(args.shape, args.dtype, args.tokenizer, model_dir, args.quantize)
        gc.collect()
        mx.clear_cache()
    for name in ("trace-engine.jsonl", "trace-http.jsonl"):
        (work / name).unlink(missing_ok=True)
    facts = {
        "bench": "serving_scale",
        **run_facts(),
        "device": str(mx.default_device()),
        "platform": platform.machine(),
        "shape": args.shape,
        "dtype": args.dtype,
        "quantize": args.quantize,
        "max_tokens": args.tokens,
        "label": args.label,
    }
    identity = gpu_identity()
    if identity is not None:  # which card, its driver, clocks and power limit
        facts["gpu"] = identity

    def emit(record: dict) -> None:
        emit_json_line({**facts, **record}, args.out)

    levels = [int(x) for x in args.levels.split(",")]
    run = Run(
        model_dir=model_dir,
        work=work,
        levels=parse_paths(args.paths, levels),
        words=args.prompt_words,
        tokens=args.tokens,
        trace=args.trace,
        deadline=t_start + args.budget_s,
        emit=emit,
        peer_args=args.peer_args.split(),
        max_running=args.max_running,
        gpu=GpuSampler(),
        label=args.label,
        py_spy=args.py_spy,
        profile_level=args.profile_level,
    )
    with run.gpu:
        for path in run.levels:
            if not run.left():
                print(f"budget spent: {path} skipped", flush=True)
                continue
            if path == "bare":
                run_bare(run)
            elif path == "engine":
                asyncio.run(run_engine(run))
            else:
                asyncio.run(run_http(run, path))


if __name__ == "__main__":
    main()

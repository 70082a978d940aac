"""MLX on Linux CPU: stock reference BLAS against the preloaded OpenBLAS, in one run.

Each side runs in its own child process (the BLAS is fixed at process start): float32
matmul GFLOP/s, then prefill and decode tokens/s of the default model (SmolLM2-135M,
float32) through mlx-lm's stream_generate. Writes benchmarks/results/blas.{json,md}.

    python benchmarks/blas_bench.py            # full run, writes results
    python benchmarks/blas_bench.py --smoke    # tiny model, seconds, writes nothing
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from model_dirs import default_model_dir, tiny_model_dir

RESULTS = Path(__file__).parent / "results"
TEXT = (
    "The history of computing is a story of machines that grew smaller, faster and cheaper, "
    "from rooms full of vacuum tubes to chips that fit in a watch. "
)


def child(args: argparse.Namespace) -> None:
    """Measure in this process, on whatever BLAS it was started with; print one JSON line."""
    import mlx.core as mx
    import mlx_lm

    from omlx.platform.blas import active_blas_library, blas_description

    out: dict = {"blas": blas_description(), "blas_library": active_blas_library()}
    out["matmul_gflops"] = {str(n): _matmul_gflops(mx, n) for n in args.matmul_sizes}
    model, tokenizer = mlx_lm.load(args.model)
    ids = tokenizer.encode(TEXT * 40)[: args.prompt_tokens]
    assert len(ids) == args.prompt_tokens, "prompt text too short"
    runs = []
    for _ in range(args.repeats + 1):  # the first run warms up
        *_, final = mlx_lm.stream_generate(model, tokenizer, ids, max_tokens=args.decode_tokens)
        runs.append(final)
    measured = runs[1:]
    out["prefill_tok_s"] = max(r.prompt_tps for r in measured)
    out["decode_tok_s"] = max(r.generation_tps for r in measured)
    out["generated_tokens"] = measured[-1].generation_tokens
    print(json.dumps(out))


def _matmul_gflops(mx, n: int, rounds: int = 3, min_round_s: float = 0.5) -> float:
    a, b = mx.random.normal((n, n)), mx.random.normal((n, n))
    mx.eval(a @ b)
    best = float("inf")
    for _ in range(rounds):
        iters, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < min_round_s or iters == 0:
            mx.eval(a @ b)
            iters += 1
        best = min(best, elapsed / iters)
    return round(2 * n**3 / best / 1e9, 1)


def run_side(name: str, env: dict[str, str], args: argparse.Namespace, model: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", "--model", str(model), *_shared_flags(args)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{name} side failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _shared_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--prompt-tokens", str(args.prompt_tokens),
        "--decode-tokens", str(args.decode_tokens),
        "--repeats", str(args.repeats),
        "--matmul-sizes", *map(str, args.matmul_sizes),
    ]  # fmt: skip


def model_dir(smoke: bool) -> Path:
    return tiny_model_dir() if smoke else default_model_dir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model, few tokens, no files")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help="model folder (default: the offline default model)")
    parser.add_argument("--prompt-tokens", type=int, default=251)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="generations per child run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating stock/openblas runs")
    parser.add_argument("--matmul-sizes", type=int, nargs="+", default=[512, 1024, 2048])
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.smoke:
        args.prompt_tokens, args.decode_tokens, args.repeats, args.rounds = 32, 8, 1, 1
        args.matmul_sizes = [256]

    from omlx.platform.blas import optimized_env, stock_env

    fast_env = optimized_env()
    if fast_env is None:
        raise SystemExit("no optimized BLAS applies here (Linux + mlx-cpu + ngsolve-openblas)")
    model = Path(args.model) if args.model else model_dir(args.smoke)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load = os.getloadavg()[0]
    # Alternate the sides so that load from other jobs on a shared machine hits both alike.
    # OpenBLAS's default (a thread per core) against one thread: on a busy machine the
    # threads wait on each other and one thread wins.
    one_thread = {**fast_env, "OPENBLAS_NUM_THREADS": "1"}
    one_thread.pop("OMP_NUM_THREADS", None)
    sides = {"stock": stock_env(), "openblas": fast_env, "openblas_1thread": one_thread}
    rounds: dict[str, list[dict]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, env in sides.items():
            rounds[name].append(run_side(name, env, args, model))
    stock, fast, single = (_best(rounds[name]) for name in sides)
    report = {
        "command": "python benchmarks/blas_bench.py" + (" --smoke" if args.smoke else ""),
        "started": started,
        "git_sha": _git_sha(),
        "machine": _machine(),
        "load_avg_1m_at_start": round(load, 2),
        "model": str(model) if args.smoke else model.name,
        "settings": {k: v for k, v in vars(args).items() if k not in ("child", "model")},
        "stock": stock,
        "openblas": fast,
        "openblas_1thread": single,
        "rounds": rounds,
        "speedup": _speedup(stock, fast),
        "speedup_1thread": _speedup(stock, single),
    }
    print(json.dumps(report))
    if not args.smoke:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "blas.json").write_text(json.dumps(report, indent=2) + "\n")
        (RESULTS / "blas.md").write_text(_markdown(report))


def _speedup(stock: dict, fast: dict) -> dict[str, float]:
    return {
        "prefill": round(fast["prefill_tok_s"] / stock["prefill_tok_s"], 1),
        "decode": round(fast["decode_tok_s"] / stock["decode_tok_s"], 1),
        **{
            f"matmul_{n}": round(fast["matmul_gflops"][n] / stock["matmul_gflops"][n], 1)
            for n in stock["matmul_gflops"]
        },
    }


def _best(runs: list[dict]) -> dict:
    """Per metric, the best of the rounds (other jobs only ever slow a run down)."""
    out = dict(runs[0])
    out["prefill_tok_s"] = round(max(r["prefill_tok_s"] for r in runs), 1)
    out["decode_tok_s"] = round(max(r["decode_tok_s"] for r in runs), 1)
    out["matmul_gflops"] = {
        n: max(r["matmul_gflops"][n] for r in runs) for n in out["matmul_gflops"]
    }
    return out


def _markdown(r: dict) -> str:
    s, f, one, m, cfg = (
        r["stock"],
        r["openblas"],
        r["openblas_1thread"],
        r["machine"],
        r["settings"],
    )
    sides = (s, f, one)

    def row(label: str, key: str, fmt: str = "{:.1f}") -> str:
        values = " | ".join(fmt.format(side[key]) for side in sides)
        best = max(f[key], one[key]) / s[key]
        return f"| {label} | {values} | {best:.1f}× |"

    rows = [
        f"| float32 matmul {n}² (GFLOP/s) | "
        + " | ".join(str(side["matmul_gflops"][n]) for side in sides)
        + f" | {max(f['matmul_gflops'][n], one['matmul_gflops'][n]) / s['matmul_gflops'][n]:.1f}× |"
        for n in s["matmul_gflops"]
    ]
    rows.append(row(f"prefill, {cfg['prompt_tokens']}-token prompt (tok/s)", "prefill_tok_s"))
    rows.append(row(f"decode, {cfg['decode_tokens']} tokens (tok/s)", "decode_tok_s"))
    return "\n".join(
        [
            "# MLX on Linux CPU: reference BLAS vs OpenBLAS",
            "",
            f"Command: `{r['command']}` (git {r['git_sha']}, {r['started']}).",
            f"Machine: {m['cpu']}, {m['cores']} cores, {m['system']}; mlx {m['mlx']}, "
            f"mlx-lm {m['mlx_lm']}; 1-minute load average at start {r['load_avg_1m_at_start']} "
            "(a shared machine: other jobs slow every side, multi-threaded BLAS the most).",
            f"Model: {r['model']}, float32, greedy. Each side: {cfg['rounds']} child processes, "
            f"alternating with the others, each {cfg['repeats']} generations after a warm-up; "
            "the table shows the best per metric (per-run values in blas.json).",
            "",
            "| | stock `mlx[cpu]` | OpenBLAS, default threads | OpenBLAS, 1 thread "
            "| best speedup |",
            "| --- | --- | --- | --- | --- |",
            *rows,
            "",
            f"Stock: {s['blas']}.",
            f"Optimized: {f['blas']}; 1 thread: `OPENBLAS_NUM_THREADS=1`.",
            "",
        ]
    )


def _git_sha() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def _machine() -> dict[str, str | int]:
    from importlib.metadata import version

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count() or 0,
        "system": f"{platform.system()} {platform.release()}",
        "mlx": version("mlx"),
        "mlx_lm": version("mlx-lm"),
    }


if __name__ == "__main__":
    main()

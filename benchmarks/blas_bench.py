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
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]
TEXT = (
    "The history of computing is a story of machines that grew smaller, faster and cheaper, "
    "from rooms full of vacuum tubes to chips that fit in a watch. "
)


def child(args: argparse.Namespace) -> None:
    """Measure in this process, on whatever BLAS it was started with; print one JSON line."""
    import mlx.core as mx
    import mlx_lm

    from omlx.engine.blas import active_blas_library, blas_description

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


def _matmul_gflops(mx, n: int, iters: int = 5, rounds: int = 3) -> float:
    a, b = mx.random.normal((n, n)), mx.random.normal((n, n))
    mx.eval(a @ b)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(iters):
            mx.eval(a @ b)
        best = min(best, (time.perf_counter() - start) / iters)
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
    if smoke:
        sys.path.insert(0, str(ROOT))
        from tests.fixtures.tiny_models import build_tiny_model

        return build_tiny_model("llama", Path(tempfile.mkdtemp(prefix="blas-bench-")))
    from omlx.engine.default_model import ensure_default_model
    from omlx.settings import omlx_home

    return ensure_default_model(omlx_home() / "models")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model, few tokens, no files")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help="model folder (default: the offline default model)")
    parser.add_argument("--prompt-tokens", type=int, default=251)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--matmul-sizes", type=int, nargs="+", default=[512, 1024, 2048])
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.smoke:
        args.prompt_tokens, args.decode_tokens, args.repeats = 32, 8, 1
        args.matmul_sizes = [256]

    from omlx.engine.blas import optimized_env, stock_env

    fast_env = optimized_env()
    if fast_env is None:
        raise SystemExit("no optimized BLAS applies here (Linux + mlx-cpu + cmeel-openblas)")
    model = Path(args.model) if args.model else model_dir(args.smoke)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load = os.getloadavg()[0]
    stock = run_side("stock", stock_env(), args, model)
    fast = run_side("openblas", fast_env, args, model)
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
        "speedup": {
            "prefill": round(fast["prefill_tok_s"] / stock["prefill_tok_s"], 2),
            "decode": round(fast["decode_tok_s"] / stock["decode_tok_s"], 2),
            **{
                f"matmul_{n}": round(fast["matmul_gflops"][n] / stock["matmul_gflops"][n], 1)
                for n in stock["matmul_gflops"]
            },
        },
    }
    print(json.dumps(report))
    if not args.smoke:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "blas.json").write_text(json.dumps(report, indent=2) + "\n")
        (RESULTS / "blas.md").write_text(_markdown(report))


def _markdown(r: dict) -> str:
    s, f, m = r["stock"], r["openblas"], r["machine"]
    rows = [
        f"| float32 matmul {n}² (GFLOP/s) | {s['matmul_gflops'][n]} | {f['matmul_gflops'][n]} "
        f"| {r['speedup'][f'matmul_{n}']}× |"
        for n in s["matmul_gflops"]
    ]
    cfg = r["settings"]
    rows.append(
        f"| prefill, {cfg['prompt_tokens']}-token prompt (tok/s) | {s['prefill_tok_s']:.1f} "
        f"| {f['prefill_tok_s']:.1f} | {r['speedup']['prefill']}× |"
    )
    rows.append(
        f"| decode, {cfg['decode_tokens']} tokens (tok/s) | {s['decode_tok_s']:.1f} "
        f"| {f['decode_tok_s']:.1f} | {r['speedup']['decode']}× |"
    )
    return "\n".join(
        [
            "# MLX on Linux CPU: reference BLAS vs OpenBLAS",
            "",
            f"Command: `{r['command']}` (git {r['git_sha']}, {r['started']}).",
            f"Machine: {m['cpu']}, {m['cores']} cores, {m['system']}; mlx {m['mlx']}, "
            f"mlx-lm {m['mlx_lm']}; 1-minute load average at start {r['load_avg_1m_at_start']} "
            "(a shared machine: other jobs may slow either side).",
            f"Model: {r['model']}, float32, greedy, best of {cfg['repeats']} runs after a warm-up.",
            "",
            "| | stock `mlx[cpu]` | OpenBLAS preloaded | speedup |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
            f"Stock: {s['blas']}.",
            f"Optimized: {f['blas']}.",
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

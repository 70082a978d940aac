"""omlx against mlx_lm.server on the same model, in one run.

Measures, per server: aggregate tokens/s, TTFT p50/p95 and inter-token gaps at each
concurrency level; decode streams disturbed by a long prefill; a burst of concurrent
streaming requests (how many are dropped). Writes JSON and a Markdown table with ratios.

    python benchmarks/serving_bench.py [--smoke] [--blas stock|preload] [--out NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from omlx.loadgen.scenarios import run_interference, run_level
from omlx.loadgen.server_process import (
    free_port,
    mlx_lm_command,
    omlx_command,
    run_facts,
    server_process,
)

RESULTS = Path(__file__).parent / "results"


def default_model_dir() -> Path:
    from omlx.engine.default_model import ensure_default_model
    from omlx.settings import omlx_home

    return ensure_default_model(omlx_home() / "models")


def eos_token_ids(model_dir: Path) -> list[int]:
    """The model's end-of-sequence ids, from config.json and generation_config.json."""
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        path = model_dir / name
        value = json.loads(path.read_text()).get("eos_token_id") if path.exists() else None
        ids.update([value] if isinstance(value, int) else value or [])
    return sorted(ids)


def blas_env(mode: str) -> dict[str, str]:
    """The environment both servers run in: stock (MLX's bundled reference BLAS) or
    preload (the optimized BLAS omlx uses, preloaded for the peer too, so the comparison
    stays honest)."""
    from omlx.engine import blas

    if mode == "stock":
        return blas.stock_env()
    env = blas.optimized_env()
    if env is None:
        raise SystemExit("no optimized BLAS applies here (macOS, CUDA, or none installed)")
    return env


async def measure_levels(
    base: str, model: str, levels: list[int], prompt_words: int, max_tokens: int
) -> list[dict]:
    """The concurrency sweep: 2x concurrency requests (at least 4) per level."""
    out = []
    for salt, conc in enumerate(levels):
        r = await run_level(
            base,
            model,
            concurrency=conc,
            num_requests=max(2 * conc, 4),
            prompt_words=prompt_words,
            max_tokens=max_tokens,
            salt=salt + 1,
        )
        print(
            f"  c={conc}: {r.aggregate_tps:.1f} tok/s, ttft p50 {r.ttft_p50_s}, "
            f"failed {r.num_failed}",
            flush=True,
        )
        out.append(r.to_dict())
    return out


async def measure(base: str, model: str, levels: list[int], args) -> dict:
    out: dict = {"levels": [], "interference": None, "burst": None}
    out["levels"] = await measure_levels(base, model, levels, args.prompt_words, args.max_tokens)
    inter = await run_interference(
        base,
        model,
        num_streams=4,
        long_prompt_words=args.long_prompt_words,
        max_tokens=args.interference_tokens,
        eos_token_ids=args.eos_token_ids,
    )
    print(f"  interference: kept {inter.speed_kept}", flush=True)
    out["interference"] = inter.to_dict()
    burst = await run_level(
        base,
        model,
        concurrency=args.burst,
        num_requests=args.burst,
        prompt_words=16,
        max_tokens=4,
        salt=99,
    )
    print(f"  burst {args.burst}: failed {burst.num_failed}", flush=True)
    out["burst"] = burst.to_dict()
    return out


def run_server(name: str, cmd: list[str], port: int, env: dict, model: str, levels, args):
    log = RESULTS / f"{args.out}-{name}.log"
    print(f"{name}: {' '.join(cmd)}", flush=True)
    with server_process(cmd, port, env=env, log_path=log) as base:
        return asyncio.run(measure(base, model, levels, args))


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def markdown(res: dict, command: str) -> str:
    o, p = res["omlx"], res["mlx_lm"]
    lines = [
        f"# Serving benchmark: omlx vs mlx_lm.server ({res['model_name']})",
        "",
        f"Command: `{command}`",
        "",
        f"Date {res['date']}, git {res['git']}, {res['machine']}, BLAS mode `{res['blas']}`.",
        "",
        "| concurrency | omlx tok/s | mlx_lm tok/s | ratio | omlx TTFT p50/p95 s | "
        "mlx_lm TTFT p50/p95 s | omlx failed | mlx_lm failed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a, b in zip(o["levels"], p["levels"], strict=True):
        lines.append(
            f"| {a['concurrency']} | {a['aggregate_tps']:.1f} | {b['aggregate_tps']:.1f} | "
            f"{ratio(a['aggregate_tps'], b['aggregate_tps'])} | "
            f"{_s(a['ttft_p50_s'])}/{_s(a['ttft_p95_s'])} | "
            f"{_s(b['ttft_p50_s'])}/{_s(b['ttft_p95_s'])} | {a['num_failed']} | {b['num_failed']} |"
        )
    oi = o["interference"]
    lines += [
        "",
        "Decode streams while another request prefills a long prompt "
        f"({oi['long_prompt_tokens']} tokens), 4 streams:",
        "",
        "| | gap before ms (p50) | gap during ms (p50) | max gap during ms | "
        "control gap ms | speed kept | kept vs before | long TTFT s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *(_interference_row(name, r["interference"]) for name, r in (("omlx", o), ("mlx_lm", p))),
        "",
        "Speed kept: the control run's gaps (the same streams alone, same tokens) over the "
        "gaps during the prefill, summed at the same chunk indices; kept vs before: mean gap "
        "before the long prompt over mean gap during it (charges context growth to the prefill).",
        "",
        f"Burst of {o['burst']['num_requests']} concurrent streaming requests: omlx dropped "
        f"{o['burst']['num_failed']}, mlx_lm dropped {p['burst']['num_failed']}.",
    ]
    return "\n".join(lines) + "\n"


def _interference_row(name: str, r: dict) -> str:
    return (
        f"| {name} | {_f(r['gap_before_ms'])} | {_f(r['gap_during_ms'])} | "
        f"{_f(r['max_gap_during_ms'])} | {_f(r['control_gap_ms'])} | {_f(r['speed_kept'])} | "
        f"{_f(r['speed_kept_vs_before'])} | {_s(r['long_ttft_s'])} |"
    )


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="tiny run to check the script works")
    ap.add_argument("--blas", choices=["stock", "preload"], default="preload")
    ap.add_argument("--levels", default="1,4,8,16")
    ap.add_argument("--prompt-words", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--long-prompt-words", type=int, default=1000)
    ap.add_argument("--interference-tokens", type=int, default=4000, help="streams' cap")
    ap.add_argument("--burst", type=int, default=256)
    ap.add_argument("--out", default="serving")
    args = ap.parse_args()
    if args.smoke:
        args.levels, args.prompt_words, args.max_tokens = "1,2", 16, 8
        args.long_prompt_words, args.interference_tokens, args.burst = 100, 400, 8
        args.out += "-smoke"
    levels = [int(x) for x in args.levels.split(",")]
    model_dir = default_model_dir()
    args.eos_token_ids = eos_token_ids(model_dir)
    env = blas_env(args.blas)
    RESULTS.mkdir(exist_ok=True)
    port = free_port()
    peer_cmd = mlx_lm_command(model_dir, port)
    omlx_cmd = omlx_command(model_dir, port)
    res = {
        "model_name": model_dir.name,
        "blas": args.blas,
        **run_facts(),
        "mlx_lm": run_server("mlx_lm", peer_cmd, port, env, "default_model", levels, args),
        # A fresh cold-tier dir: blocks left by an earlier run would turn this run's
        # (deterministic) prompts into cache hits.
        "omlx": run_server(
            "omlx",
            omlx_cmd,
            port,
            {**env, "OMLX_CACHE__COLD_DIR": tempfile.mkdtemp()},
            model_dir.name,
            levels,
            args,
        ),
    }
    command = "python benchmarks/serving_bench.py " + " ".join(sys.argv[1:])
    res["command"] = command
    (RESULTS / f"{args.out}.json").write_text(json.dumps(res, indent=2))
    (RESULTS / f"{args.out}.md").write_text(markdown(res, command))
    print(markdown(res, command))


if __name__ == "__main__":
    main()

"""omlx against mlx_lm.server on the same model, in one run.

Measures, per server: aggregate tokens/s, TTFT p50/p95 and inter-token gaps at each
concurrency level; decode streams disturbed by a long prefill; a burst of concurrent
streaming requests (how many are dropped). Writes JSON and a Markdown table with ratios.

    python benchmarks/serving_bench.py [--smoke] [--repeats 3] [--blas stock|preload] [--out NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

from model_dirs import default_model_dir

from omlx.loadgen.scenarios import run_interference, run_level
from omlx.loadgen.server_process import (
    free_port,
    mlx_lm_command,
    omlx_command,
    run_facts,
    server_process,
)

RESULTS = Path(__file__).parent / "results"


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
    from omlx.platform import blas

    if mode == "stock":
        return blas.stock_env()
    env = blas.optimized_env()
    if env is None:
        raise SystemExit("no optimized BLAS applies here (macOS, CUDA, or none installed)")
    # The thread count is pinned for both: omlx's governor (blas_threads.py) would move it
    # and the peer's cannot; serving_blas_threads.py compares the governed omlx.
    env.pop(blas.ENV_AUTO_THREADS, None)
    return env


async def measure_levels(
    base: str,
    model: str,
    levels: list[int],
    prompt_words: int,
    max_tokens: int,
    salt_base: int = 0,
) -> list[dict]:
    """The concurrency sweep: 2x concurrency requests (at least 4) per level."""
    out = []
    for i, conc in enumerate(levels):
        r = await run_level(
            base,
            model,
            concurrency=conc,
            num_requests=max(2 * conc, 4),
            prompt_words=prompt_words,
            max_tokens=max_tokens,
            salt=salt_base + i + 1,
        )
        print(
            f"  c={conc}: {r.aggregate_tps:.1f} tok/s, ttft p50 {r.ttft_p50_s}, "
            f"failed {r.num_failed}",
            flush=True,
        )
        out.append(r.to_dict())
    return out


async def interleaved_sweeps(servers: dict[str, tuple[str, str]], levels, args) -> dict:
    """args.repeats sweeps per server, alternating servers level by level.

    Both servers stay up the whole time and take turns on the same prompts (a new salt per
    repeat, so no prompt is a cache hit), the first mover swapping every repeat: load on a
    shared machine drifts over minutes, and running one server's sweep entirely before
    the other's charged that drift to whichever went second.
    """
    for base, model in servers.values():  # first requests pay one-off warm-up costs
        await run_level(base, model, concurrency=2, num_requests=2, prompt_words=16,
                        max_tokens=4, salt=98)  # fmt: skip
    sweeps: dict[str, list[list[dict]]] = {name: [] for name in servers}
    for rep in range(args.repeats):
        order = list(servers) if rep % 2 == 0 else list(servers)[::-1]
        runs: dict[str, list[dict]] = {name: [] for name in servers}
        for i, conc in enumerate(levels):
            for name in order:
                base, model = servers[name]
                print(f"{name} repeat {rep}:", end="")
                runs[name] += await measure_levels(
                    base, model, [conc], args.prompt_words, args.max_tokens,
                    salt_base=rep * len(levels) + i,
                )  # fmt: skip
        for name in servers:
            sweeps[name].append(runs[name])
    return sweeps


async def measure_server(base: str, model: str, args) -> dict:
    """The long-prefill interference and the burst, for one server."""
    inter = await run_interference(
        base,
        model,
        num_streams=4,
        long_prompt_words=args.long_prompt_words,
        max_tokens=args.interference_tokens,
        eos_token_ids=args.eos_token_ids,
    )
    print(f"  interference: kept {inter.speed_kept}", flush=True)
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
    return {"interference": inter.to_dict(), "burst": burst.to_dict()}


async def measure(servers: dict[str, tuple[str, str]], levels, args) -> dict:
    sweeps = await interleaved_sweeps(servers, levels, args)
    out = {}
    for name, (base, model) in servers.items():
        print(f"{name}:", flush=True)
        out[name] = {"sweeps": sweeps[name], **await measure_server(base, model, args)}
    return out


def level_summary(sweeps: list[list[dict]]) -> list[dict]:
    """Per level, the median over repeats of tok/s and TTFT, and the failures summed."""
    out = []
    for runs in zip(*sweeps, strict=True):
        out.append(
            {
                "concurrency": runs[0]["concurrency"],
                "aggregate_tps": statistics.median(r["aggregate_tps"] for r in runs),
                "ttft_p50_s": _median(r["ttft_p50_s"] for r in runs),
                "ttft_p95_s": _median(r["ttft_p95_s"] for r in runs),
                "num_failed": sum(r["num_failed"] for r in runs),
                "repeats_tps": [round(r["aggregate_tps"], 2) for r in runs],
            }
        )
    return out


def _median(xs) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


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
        f"Concurrency sweep: {res['repeats']} repeats, the servers taking turns level by "
        "level (first mover swapped each repeat); tok/s and TTFT are medians over repeats, "
        "the ratio is of the medians, failures are summed.",
        "",
        "| concurrency | omlx tok/s | mlx_lm tok/s | ratio | ratio per repeat | "
        "omlx TTFT p50/p95 s | mlx_lm TTFT p50/p95 s | omlx failed | mlx_lm failed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a, b in zip(o["levels"], p["levels"], strict=True):
        per_repeat = zip(a["repeats_tps"], b["repeats_tps"], strict=True)
        lines.append(
            f"| {a['concurrency']} | {a['aggregate_tps']:.1f} | {b['aggregate_tps']:.1f} | "
            f"{ratio(a['aggregate_tps'], b['aggregate_tps'])} | "
            f"{' '.join(str(ratio(x, y)) for x, y in per_repeat)} | "
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
    ap.add_argument("--repeats", type=int, default=3, help="interleaved sweeps per server")
    ap.add_argument("--prompt-words", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--long-prompt-words", type=int, default=1000)
    ap.add_argument("--interference-tokens", type=int, default=4000, help="streams' cap")
    ap.add_argument("--burst", type=int, default=256)
    ap.add_argument("--out", default="serving")
    args = ap.parse_args()
    if args.smoke:
        args.levels, args.prompt_words, args.max_tokens, args.repeats = "1,2", 16, 8, 2
        args.long_prompt_words, args.interference_tokens, args.burst = 100, 400, 8
        args.out += "-smoke"
    levels = [int(x) for x in args.levels.split(",")]
    model_dir = default_model_dir()
    args.eos_token_ids = eos_token_ids(model_dir)
    env = blas_env(args.blas)
    RESULTS.mkdir(exist_ok=True)
    peer_port, omlx_port = free_port(), free_port()
    commands = {
        "omlx": (omlx_command(model_dir, omlx_port), omlx_port, model_dir.name),
        "mlx_lm": (mlx_lm_command(model_dir, peer_port), peer_port, "default_model"),
    }
    # A fresh cold-tier dir for omlx: blocks left by an earlier run would turn this run's
    # (deterministic) prompts into cache hits.
    envs = {"omlx": {**env, "OMLX_CACHE__COLD_DIR": tempfile.mkdtemp()}, "mlx_lm": env}
    with contextlib.ExitStack() as stack:
        servers = {}
        for name, (cmd, port, model) in commands.items():
            print(f"{name}: {' '.join(cmd)}", flush=True)
            log = RESULTS / f"{args.out}-{name}.log"
            base = stack.enter_context(server_process(cmd, port, env=envs[name], log_path=log))
            servers[name] = (base, model)
        measured = asyncio.run(measure(servers, levels, args))
    res = {"model_name": model_dir.name, "blas": args.blas, "repeats": args.repeats}
    res.update(run_facts())
    for name, m in measured.items():
        res[name] = {"levels": level_summary(m["sweeps"]), **m}
    command = "python benchmarks/serving_bench.py " + " ".join(sys.argv[1:])
    res["command"] = command
    (RESULTS / f"{args.out}.json").write_text(json.dumps(res, indent=2))
    (RESULTS / f"{args.out}.md").write_text(markdown(res, command))
    print(markdown(res, command))


if __name__ == "__main__":
    main()

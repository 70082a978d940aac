"""omlx and mlx_lm.server at 1 and 2 OpenBLAS threads, and omlx governed, in one run.

serving_bench.py pins one BLAS thread for both servers. This checks the comparison when
both use every core, and omlx's default, where blas_threads.py moves the count with the
machine's other load: five servers up at once, taking turns level by level
(serving_bench.interleaved_sweeps), medians over repeats.

    python benchmarks/serving_blas_threads.py [--levels 4,16] [--repeats 3] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile

from model_dirs import default_model_dir
from serving_bench import RESULTS, blas_env, interleaved_sweeps, level_summary, ratio

from omlx.loadgen.server_process import (
    free_port,
    mlx_lm_command,
    omlx_command,
    run_facts,
    server_process,
)
from omlx.platform import blas

THREADS = (1, 2)


def markdown(res: dict) -> str:
    lv = res["levels"]
    lines = [
        f"# Serving at 1 and 2 OpenBLAS threads: omlx vs mlx_lm.server ({res['model_name']})",
        "",
        f"Command: `{res['command']}`",
        "",
        f"Date {res['date']}, git {res['git']}, {res['machine']}. Aggregate tok/s, medians "
        f"of {res['repeats']} interleaved repeats (per-repeat values in brackets).",
        "",
        "| concurrency | omlx 1t | mlx_lm 1t | ratio 1t | omlx 2t | mlx_lm 2t | ratio 2t | "
        "omlx auto | auto / mlx_lm 1t | auto / mlx_lm 2t |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, conc in enumerate(res["concurrency"]):
        t = {k: v[i] for k, v in lv.items()}
        cell = {k: f"{x['aggregate_tps']:.1f} {x['repeats_tps']}" for k, x in t.items()}
        tps = {k: x["aggregate_tps"] for k, x in t.items()}
        lines.append(
            f"| {conc} | {cell['omlx-1t']} | {cell['mlx_lm-1t']} | "
            f"{ratio(tps['omlx-1t'], tps['mlx_lm-1t'])} | {cell['omlx-2t']} | "
            f"{cell['mlx_lm-2t']} | {ratio(tps['omlx-2t'], tps['mlx_lm-2t'])} | "
            f"{cell['omlx-auto']} | {ratio(tps['omlx-auto'], tps['mlx_lm-1t'])} | "
            f"{ratio(tps['omlx-auto'], tps['mlx_lm-2t'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--levels", default="4,16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-words", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--smoke", action="store_true", help="tiny run to check the script works")
    ap.add_argument("--out", default="serving_blas_threads")
    args = ap.parse_args()
    if args.smoke:
        args.levels, args.prompt_words, args.max_tokens, args.repeats = "2", 16, 8, 1
        args.out += "-smoke"
    levels = [int(x) for x in args.levels.split(",")]
    model_dir = default_model_dir()
    with contextlib.ExitStack() as stack:
        servers = {}
        for name, command, model in (
            ("omlx", omlx_command, model_dir.name),
            ("mlx_lm", mlx_lm_command, "default_model"),
        ):
            for threads in THREADS if name == "mlx_lm" else (*THREADS, "auto"):
                port = free_port()
                if threads == "auto":  # omlx's default: the governor moves the count
                    pinned = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
                    env = blas.optimized_env(pinned)
                else:
                    env = {**blas_env("preload"), "OPENBLAS_NUM_THREADS": str(threads)}
                env["OMLX_CACHE__COLD_DIR"] = tempfile.mkdtemp()  # no hits left by earlier runs
                key = f"{name}-{threads}" + ("t" if threads != "auto" else "")
                log = RESULTS / f"{args.out}-{key}.log"
                base = stack.enter_context(
                    server_process(command(model_dir, port), port, env=env, log_path=log)
                )
                servers[key] = (base, model)
        sweeps = asyncio.run(interleaved_sweeps(servers, levels, args))
    res = {"model_name": model_dir.name, "repeats": args.repeats, "concurrency": levels}
    res.update(run_facts())
    res["command"] = "python benchmarks/serving_blas_threads.py " + " ".join(sys.argv[1:])
    res["levels"] = {k: level_summary(v) for k, v in sweeps.items()}
    (RESULTS / f"{args.out}.json").write_text(json.dumps(res, indent=2))
    (RESULTS / f"{args.out}.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()

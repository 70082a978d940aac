"""omlx's BLAS thread governor when another process takes a core, and after it stops.

Starts `omlx serve` with omlx choosing the OpenBLAS thread count, then runs one
concurrency level three times: on an idle machine, beside a busy-loop process, and idle
again. Prints tok/s and TTFT per phase and the governor's log lines; writes JSON.

    python benchmarks/blas_contention.py [--concurrency 4] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile

from model_dirs import default_model_dir
from serving_bench import RESULTS

from omlx.loadgen.scenarios import run_level
from omlx.loadgen.server_process import free_port, omlx_command, run_facts, server_process
from omlx.platform import blas


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--smoke", action="store_true", help="tiny run to check the script works")
    ap.add_argument("--out", default="blas_contention")
    args = ap.parse_args()
    words = 16 if args.smoke else 128
    if args.smoke:
        args.max_tokens, args.out = 4, args.out + "-smoke"
    model_dir = default_model_dir()
    port = free_port()
    unpinned = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env = blas.optimized_env(unpinned)
    if env is None or env.get(blas.ENV_AUTO_THREADS) != "1":
        raise SystemExit("no OpenBLAS whose thread count omlx chooses here")
    env["OMLX_CACHE__COLD_DIR"] = tempfile.mkdtemp()
    log = RESULTS / f"{args.out}-omlx.log"
    phases = []

    def level(salt: int) -> dict:
        r = asyncio.run(
            run_level(base, model_dir.name, concurrency=args.concurrency,
                      num_requests=args.concurrency, prompt_words=words,
                      max_tokens=args.max_tokens, salt=salt)
        )  # fmt: skip
        return {"aggregate_tps": round(r.aggregate_tps, 2), "ttft_p50_s": r.ttft_p50_s}

    with server_process(omlx_command(model_dir, port), port, env=env, log_path=log) as base:
        level(98)  # warm-up
        phases.append({"phase": "idle", **level(1)})
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            phases.append({"phase": "beside a busy loop", **level(2)})
        finally:
            burner.kill()
        phases.append({"phase": "idle again", **level(3)})
    changes = [line.split("] ", 1)[-1] for line in log.read_text().splitlines()
               if "BLAS threads" in line]  # fmt: skip
    res = {"concurrency": args.concurrency, "phases": phases, "governor_log": changes}
    res.update(run_facts())
    res["command"] = "python benchmarks/blas_contention.py " + " ".join(sys.argv[1:])
    (RESULTS / f"{args.out}.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()

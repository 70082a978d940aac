"""One omlx source tree's serving levels, for an A/B between revisions.

Runs serving_bench.py's concurrency sweep (same prompts, same settings) against `omlx serve`
started from TREE (put first on PYTHONPATH), on the optimized BLAS; prints one JSON line.

    git worktree add /tmp/old REV && python benchmarks/serving_ab.py /tmp/old
    python benchmarks/serving_ab.py .
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
from pathlib import Path

from model_dirs import default_model_dir
from serving_bench import blas_env, measure_levels

from omlx.loadgen.server_process import free_port, omlx_command, run_facts, server_process


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("tree", type=Path, help="an omlx source tree (a git worktree of a revision)")
    ap.add_argument("--levels", default="4,8,16")
    ap.add_argument("--prompt-words", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--smoke", action="store_true", help="tiny run to check the script works")
    args = ap.parse_args()
    if args.smoke:
        args.levels, args.prompt_words, args.max_tokens = "2", 16, 8
    tree = args.tree.resolve()
    levels = [int(x) for x in args.levels.split(",")]
    model_dir = default_model_dir()
    port = free_port()
    env = {
        **blas_env("preload"),
        "OMLX_CACHE__COLD_DIR": tempfile.mkdtemp(),  # no hits left by an earlier run
        "PYTHONPATH": str(tree),
    }
    with server_process(omlx_command(model_dir, port), port, env=env) as base:
        res = asyncio.run(
            measure_levels(base, model_dir.name, levels, args.prompt_words, args.max_tokens)
        )
    rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(json.dumps({**run_facts(), "tree": str(tree), "tree_git": rev, "levels": res}))


if __name__ == "__main__":
    main()

"""Long prompts on a CPU: omlx's prefill attention (engine.cpu_prefill_attention, numpy's
softmax) against omlx with MLX's attention and mlx_lm.server, in one run.

    python benchmarks/cpu_prefill.py [--prompt-words 2200] [--requests 2] [--out cpu_prefill]

The default model (SmolLM2-135M-Instruct, float32) is served by each arm in turn, one
server at a time, with the same preloaded BLAS: omlx with its defaults, omlx with
`engine.cpu_prefill_attention = "off"` and mlx_lm.server. One stream at a time, each
prompt distinct (no prefix reuse), a few generated tokens; `--requests` timed after a
short warm-up request. The figure is the time to the first token (p50): a long prompt's
prefill, as an agent's first request pays it. Writes JSON lines and a Markdown table with
ratios to mlx_lm.server.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from cpu_float32 import measure_arm
from serving_bench import blas_env

from omlx.loadgen.server_process import emit_json_line, run_facts

RESULTS = Path(__file__).parent / "results"
ARMS = ("omlx", "omlx_off", "mlx_lm")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt-words", type=int, default=2200)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--out", default="cpu_prefill")
    args = ap.parse_args()
    from omlx.models.default_model import ensure_default_model

    env = blas_env("preload")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{args.out}.jsonl"
    home = Path(tempfile.mkdtemp(prefix="omlx-cpu-prefill-"))
    folder = ensure_default_model(home / "models")
    command = "python benchmarks/cpu_prefill.py " + " ".join(sys.argv[1:])
    rows = []
    for arm in args.arms.split(","):
        log = RESULTS / f"{args.out}-{arm}.log"
        off = {"OMLX_ENGINE__CPU_PREFILL_ATTENTION": "off"}
        result = measure_arm(arm, folder, env, home, off, log, args, salt=3)
        row = {"arm": arm, **result, **run_facts(), "command": command}
        rows.append(row)
        emit_json_line(row, out)
        print(f"  ttft p50 {result['ttft_p50_s']} s")
    print(markdown(rows, command))


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "| server | TTFT p50 (s) | vs mlx_lm.server |",
        "| --- | --- | --- |",
    ]
    peer = next((r["ttft_p50_s"] for r in rows if r["arm"] == "mlx_lm"), None)
    for r in rows:
        ttft = r["ttft_p50_s"]
        speed = peer / ttft if ttft and peer else None
        lines.append(f"| {r['arm']} | {ttft:.2f} | {'-' if speed is None else f'{speed:.2f}x'} |")
    return f"Command: `{command}` ({os.cpu_count()} cores)\n\n" + "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

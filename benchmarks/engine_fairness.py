"""Decode fairness during a long prefill, engine alone (no HTTP).

    python benchmarks/engine_fairness.py [--model DIR] [--streams 4] [--long-tokens 1062]
                                         [--share 0.3] [--smoke]

N streams decode; their inter-token gap is measured alone, then while one long prompt
prefills (from its Started to its first token). Prints one JSON line with the decode
speed kept during the prefill (target: >= 70% at the default engine.prefill_share 0.3)
and the long prompt's TTFT, which pays for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


async def measure(
    model_dir: Path, streams: int, long_tokens: int, share: float, baseline_tokens: int
) -> dict[str, float]:
    from omlx.engine.api import (
        ChatMessage,
        GenerationRequest,
        RequestId,
        SamplingParams,
        Started,
        Token,
    )
    from omlx.engine.pool import ModelPool
    from omlx.settings import EngineSettings, Settings

    pool = ModelPool(Settings(engine=EngineSettings(prefill_share=share)), models={"m": model_dir})
    greedy = SamplingParams(temperature=0)
    phase = {"name": "warmup"}
    gaps: dict[str, list[float]] = {"alone": [], "prefill": []}
    seen = asyncio.Event()

    async def stream(i: int) -> None:
        req = GenerationRequest(
            request_id=RequestId(f"s{i}"),
            model="m",
            max_tokens=None,
            messages=[ChatMessage("user", f"Story number {i}, please.")],
            sampling=greedy,
        )
        last = None
        async for event in pool.generate(req):
            if not isinstance(event, Token):
                continue
            now = time.perf_counter()
            if last is not None and phase["name"] in gaps:
                gaps[phase["name"]].append(now - last)
            last = now
            seen.set()
            if phase["name"] == "done":
                return

    try:
        tasks = [asyncio.create_task(stream(i)) for i in range(streams)]
        while not seen.is_set() or len(gaps["alone"]) < baseline_tokens * streams:
            for t in tasks:
                if t.done():
                    t.result()  # a stream failed: raise its error instead of waiting forever
            if seen.is_set():
                phase["name"] = "alone"
            await asyncio.sleep(0.05)
        phase["name"] = "between"
        long_req = GenerationRequest(
            request_id=RequestId("long"),
            model="m",
            max_tokens=1,
            prompt_token_ids=[(7 * i) % 1000 + 100 for i in range(long_tokens)],
            sampling=greedy,
        )
        t_submit = t_started = time.perf_counter()
        async for event in pool.generate(long_req):
            if isinstance(event, Started):
                t_started, phase["name"] = time.perf_counter(), "prefill"
            elif isinstance(event, Token):
                t_first = time.perf_counter()
                phase["name"] = "done"
        await asyncio.gather(*tasks)
    finally:
        await pool.close(grace_s=0)
    alone, during = gaps["alone"], gaps["prefill"]
    mean_alone, mean_during = statistics.fmean(alone), statistics.fmean(during)
    return {
        "itl_alone_ms": round(1000 * mean_alone, 2),
        "itl_during_prefill_ms": round(1000 * mean_during, 2),
        "itl_during_prefill_p50_ms": round(1000 * statistics.median(during), 2),
        "itl_during_prefill_p90_ms": round(1000 * statistics.quantiles(during, n=10)[-1], 2),
        # decode speed = 1 / mean inter-token gap
        "decode_speed_kept_pct": round(100 * mean_alone / mean_during, 1),
        "long_prompt_ttft_s": round(t_first - t_submit, 3),
        "long_prompt_prefill_s": round(t_first - t_started, 3),
        "decode_tokens_during_prefill": len(gaps["prefill"]),
    }


def main() -> None:
    from omlx.engine.blas import reexec_with_blas

    reexec_with_blas()  # the BLAS `omlx serve` runs on (OMLX_BLAS=off: MLX's reference one)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, help="MLX model folder (default: the default model)")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--long-tokens", type=int, default=1062)
    ap.add_argument("--share", type=float, default=0.3, help="engine.prefill_share")
    ap.add_argument("--baseline-tokens", type=int, default=20, help="tokens per stream alone")
    ap.add_argument("--smoke", action="store_true", help="tiny random model")
    args = ap.parse_args()
    if args.smoke:
        from tests.fixtures.tiny_models import build_tiny_model

        args.model = build_tiny_model("llama", Path(tempfile.mkdtemp()) / "tiny")
        args.long_tokens = 3000
    elif args.model is None:
        from omlx.engine.default_model import ensure_default_model
        from omlx.settings import omlx_home

        args.model = ensure_default_model(omlx_home() / "models")
    result = asyncio.run(
        measure(args.model, args.streams, args.long_tokens, args.share, args.baseline_tokens)
    )
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(
        json.dumps(
            {
                "bench": "engine_fairness",
                "git": sha,
                "model": args.model.name,
                "streams": args.streams,
                "long_tokens": args.long_tokens,
                "prefill_share": args.share,
                **result,
            }
        )
    )


if __name__ == "__main__":
    main()

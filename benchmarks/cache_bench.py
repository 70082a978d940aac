"""Prefix-cache TTFT: omlx (uncached, hot hit, cold hit after restart) beside mlx_lm.server.

Part 1: a ~4k-token prompt, sent to a fresh omlx (uncached), again (hot-tier hit), then
to a restarted omlx over the same cache dir (cold-tier hit); mlx_lm.server gets the same
prompt twice (its own in-memory prompt cache). Part 2: a 6-turn agent conversation,
TTFT per turn on both servers. Writes results/cache_bench.{json,md}.

    python benchmarks/cache_bench.py [--smoke]

Both servers run on the same BLAS (the optimized one `omlx` uses, preloaded for the peer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import httpx
from model_dirs import default_model_dir

RESULTS = Path(__file__).parent / "results"


async def ttft(base: str, model: str, messages: list[dict], max_tokens: int) -> dict:
    """Stream one greedy chat request; TTFT, reply text and cached tokens."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    t0, first, text, cached, prompt = time.perf_counter(), None, "", 0, 0
    async with (
        httpx.AsyncClient(timeout=900) as client,
        client.stream("POST", f"{base}/v1/chat/completions", json=body) as r,
    ):
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            chunk = json.loads(line[5:])
            for c in chunk.get("choices") or []:
                delta = c.get("delta", {}).get("content") or ""
                if delta and first is None:
                    first = time.perf_counter()
                text += delta
            if chunk.get("usage"):
                prompt = chunk["usage"].get("prompt_tokens", 0)
                details = chunk["usage"].get("prompt_tokens_details") or {}
                cached = details.get("cached_tokens") or 0
    return {"ttft_s": round((first or time.perf_counter()) - t0, 3), "prompt_tokens": prompt,
            "cached_tokens": cached, "text": text}  # fmt: skip


async def conversation(base: str, model: str, turns: int, words: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are a coding agent. " + _text(words, 0)}]
    out = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"Step {i}: " + _text(words // 4, i + 1)})
        r = await ttft(base, model, messages, max_tokens=16)
        messages.append({"role": "assistant", "content": r["text"]})
        out.append({k: v for k, v in r.items() if k != "text"})
    return out


def _text(words: int, salt: int) -> str:
    vocab = ("file", "function", "error", "test", "patch", "build", "result", "module", "call")
    return " ".join(vocab[(i * 5 + salt * 3) % len(vocab)] + str(i % 97) for i in range(words))


def start(cmd: list[str], port: int, extra_env: dict[str, str] | None = None):
    from omlx.loadgen.server_process import server_process
    from omlx.platform import blas

    env = blas.optimized_env() or dict(os.environ)
    return server_process(cmd, port, env={**env, **(extra_env or {})})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="short prompts, 2 turns")
    args = ap.parse_args()
    from omlx.loadgen.server_process import free_port, mlx_lm_command, omlx_command, run_facts

    model_dir = default_model_dir()
    words, turns, conv_words = (200, 2, 60) if args.smoke else (1800, 6, 400)
    prompt = [{"role": "user", "content": "Summarise: " + _text(words, 7)}]
    port = free_port()
    res: dict = {"model": model_dir.name, **run_facts()}
    with tempfile.TemporaryDirectory() as cold:
        omlx_cmd = omlx_command(model_dir, port)
        cold_env = {"OMLX_CACHE__COLD_DIR": cold}
        m = model_dir.name
        with start(omlx_cmd, port, cold_env) as base:
            res["omlx_uncached"] = asyncio.run(ttft(base, m, prompt, 8))
            res["omlx_hot"] = asyncio.run(ttft(base, m, prompt, 8))
        with start(omlx_cmd, port, cold_env) as base:
            res["omlx_cold_after_restart"] = asyncio.run(ttft(base, m, prompt, 8))
            res["omlx_turns"] = asyncio.run(conversation(base, m, turns, conv_words))
    peer = mlx_lm_command(model_dir, port)
    with start(peer, port) as base:
        res["mlx_lm_first"] = asyncio.run(ttft(base, "default_model", prompt, 8))
        res["mlx_lm_repeat"] = asyncio.run(ttft(base, "default_model", prompt, 8))
        res["mlx_lm_turns"] = asyncio.run(conversation(base, "default_model", turns, conv_words))
    for k in (
        "omlx_uncached",
        "omlx_hot",
        "omlx_cold_after_restart",
        "mlx_lm_first",
        "mlx_lm_repeat",
    ):
        res[k].pop("text", None)
    out = "cache_bench-smoke" if args.smoke else "cache_bench"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{out}.json").write_text(json.dumps(res, indent=2))
    (RESULTS / f"{out}.md").write_text(markdown(res))
    print(markdown(res))


def markdown(res: dict) -> str:
    u = res["omlx_uncached"]["ttft_s"]
    rows = [("omlx uncached", res["omlx_uncached"]), ("omlx hot hit", res["omlx_hot"]),
            ("omlx cold hit after restart", res["omlx_cold_after_restart"]),
            ("mlx_lm.server first", res["mlx_lm_first"]),
            ("mlx_lm.server repeat", res["mlx_lm_repeat"])]  # fmt: skip
    lines = [f"# Prefix cache TTFT ({res['model']}, {res['machine']}, git {res['git']}, "
             f"{res['date']})", "", "| case | prompt tokens | cached | TTFT s | vs omlx uncached |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, r in rows:
        lines.append(f"| {name} | {r['prompt_tokens']} | {r['cached_tokens']} | {r['ttft_s']} | "
                     f"{r['ttft_s'] / u:.0%} |")  # fmt: skip
    lines += ["", "Agent conversation, TTFT per turn (s):", "",
              "| turn | prompt tokens | omlx cached | omlx TTFT | mlx_lm TTFT |",
              "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for i, (a, b) in enumerate(zip(res["omlx_turns"], res["mlx_lm_turns"], strict=True)):
        lines.append(f"| {i + 1} | {a['prompt_tokens']} | {a['cached_tokens']} | {a['ttft_s']} "
                     f"| {b['ttft_s']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

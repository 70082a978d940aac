"""Where a DFlash cycle's time goes: target verify with/without trim, draft propose.

python benchmarks/dflash_profile.py [--shape qwen3-0.6b] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import time

import mlx.core as mx

from benchmarks.dflash_bench import SHAPES, build_target
from omlx.draft.capture import TargetAdapter
from omlx.draft.loop import DFlashDrafter
from omlx.draft.random_init import draft_config_for, random_draft


def timed(fn, n: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen3-0.6b")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.shape, a.n = "tiny", 5
    dtype = mx.float32 if a.shape == "tiny" else mx.bfloat16
    model = build_target(a.shape, dtype)
    vocab = SHAPES[a.shape]["vocab_size"]
    adapter = TargetAdapter(model, (1, 2))
    prompt = mx.random.randint(0, vocab - 1, (1, 256))
    block = mx.random.randint(0, vocab - 1, (1, 16))
    one = block[:, :1]
    out = {"shape": a.shape, "device": str(mx.default_device())}

    from mlx_lm.models.cache import make_prompt_cache

    # Each variant advances the cache by one token per call, as a τ = 1 DFlash cycle does,
    # so every call sees a new key length.
    variants = (("stock", make_prompt_cache(model)), ("bucketed", adapter.make_cache()))
    for name, cache in variants:
        mx.eval(model(prompt, cache=cache))

        def verify_advance(cache=cache):
            mx.eval(model(block, cache=cache).argmax(-1))
            for c in cache:
                c.trim(15)

        def step_advance(cache=cache):
            mx.eval(model(one, cache=cache).argmax(-1))

        out[f"verify16_{name}_ms"] = timed(verify_advance, a.n)
        out[f"decode1_{name}_ms"] = timed(step_advance, a.n)

    draft = random_draft(draft_config_for(model, num_layers=5), dtype=dtype)
    drafter = DFlashDrafter(draft, adapter)
    drafter.start()
    ctx = mx.random.normal((1, 256, draft.fc.weight.shape[1])).astype(dtype)
    mx.eval(drafter.propose([1], ctx))
    ctx1 = ctx[:, :1]
    committed = [1, 2, 3]

    def propose():
        drafter.propose(committed, ctx1).argmax(-1).tolist()

    def propose_no_head():
        blk = mx.array([1] * 16)[None]
        mx.eval(drafter.model(adapter.embed(blk), ctx1, drafter._cache))

    out["draft_propose_ms"] = timed(propose, a.n)
    out["draft_no_head_ms"] = timed(propose_no_head, a.n)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

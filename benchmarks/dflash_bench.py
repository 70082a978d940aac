"""DFlash loop cost on synthetic targets of real shapes: τ, time split, speedup vs plain.

    python benchmarks/dflash_bench.py [--shape qwen3-8b] [--taus 1,4,8,16] [--smoke]

No trained draft exists offline, so besides a random draft (τ ≈ 1) the loop is driven by
simulated drafts: the real draft network runs every cycle (its cost stays in the timing)
but proposes the target's own greedy continuation with an error at position τ - 1, so a
cycle commits exactly τ tokens. That measures what a draft of acceptance τ would buy on
this device. One JSON line per run; --out appends them to a file.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import subprocess
import time

import mlx.core as mx

from omlx.draft.baseline import plain_generate
from omlx.draft.loop import DFlashDrafter, DFlashGenerator, DFlashParams
from omlx.draft.random_init import draft_config_for, random_draft

SHAPES = {  # Qwen3 dense shapes; "tiny" runs anywhere in seconds
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=4,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
    ),
    "qwen3-0.6b": dict(
        hidden_size=1024,
        num_hidden_layers=28,
        intermediate_size=3072,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
    ),
    "qwen3-4b": dict(
        hidden_size=2560,
        num_hidden_layers=36,
        intermediate_size=9728,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
    ),
    "qwen3-8b": dict(
        hidden_size=4096,
        num_hidden_layers=36,
        intermediate_size=12288,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
    ),
}
HYBRID_SHAPES = {  # qwen3_5 (GatedDeltaNet + attention every 4th layer); not a release's shape
    "hybrid-tiny": dict(
        hidden_size=64,
        num_hidden_layers=4,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
        linear_num_value_heads=4,
        linear_num_key_heads=2,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
    ),
    "hybrid-2k": dict(
        hidden_size=2048,
        num_hidden_layers=24,
        intermediate_size=6144,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=256,
        vocab_size=151936,
        linear_num_value_heads=32,
        linear_num_key_heads=16,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
    ),
}
SHAPES.update(HYBRID_SHAPES)


class SimulatedDrafter:
    """Runs the real draft network, then proposes the known continuation, wrong at τ - 1."""

    def __init__(self, inner: DFlashDrafter, prompt: list[int], cont: list[int], tau: int):
        self.inner, self.prompt, self.cont, self.tau = inner, prompt, cont, tau
        self.draft_block_size = inner.draft_block_size
        self.vocab = inner.target.vocab_size

    def start(self) -> None:
        self.inner.start()

    def propose(self, committed, context):
        mx.eval(self.inner.propose(committed, context))  # keep the draft's real cost
        done = len(committed) - len(self.prompt)
        ids = (self.cont[done:] + [0] * self.draft_block_size)[: self.draft_block_size - 1]
        if self.tau <= len(ids):
            ids[self.tau - 1] = (ids[self.tau - 1] + 1) % self.vocab
        logits = mx.zeros((len(ids), self.vocab))
        return mx.put_along_axis(logits, mx.array(ids)[:, None], mx.array(1.0), axis=-1)


def qwen3_config(shape: str) -> dict:
    """The config.json of a dense Qwen3 model of this shape."""
    return dict(
        SHAPES[shape],
        model_type="qwen3",
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        max_position_embeddings=40960,
        tie_word_embeddings=False,
    )


def build_target(shape: str, dtype: mx.Dtype):
    if shape in HYBRID_SHAPES:
        qwen3_5 = importlib.import_module("mlx_lm.models.qwen3_5")
        text = dict(
            HYBRID_SHAPES[shape],
            model_type="qwen3_5_text",
            full_attention_interval=4,
            linear_conv_kernel_dim=4,
            tie_word_embeddings=False,
        )
        mx.random.seed(0)
        model = qwen3_5.Model(
            qwen3_5.ModelArgs.from_dict({"model_type": "qwen3_5", "text_config": text})
        )
        model.set_dtype(dtype)
        mx.eval(model.parameters())
        return model
    qwen3 = importlib.import_module("mlx_lm.models.qwen3")
    mx.random.seed(0)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(qwen3_config(shape)))
    model.set_dtype(dtype)
    mx.eval(model.parameters())
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen3-8b", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--taus", default="1,4,8,16")
    ap.add_argument("--draft-layers", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny shape, few tokens")
    a = ap.parse_args()
    if a.smoke:
        a.shape, a.dtype, a.prompt_tokens, a.max_tokens, a.taus = "tiny", "float32", 32, 40, "1,16"
    dtype = getattr(mx, a.dtype)
    target = build_target(a.shape, dtype)
    vocab = SHAPES[a.shape]["vocab_size"]
    prompt = [int(t) for t in mx.random.randint(0, vocab - 1, (a.prompt_tokens,)).tolist()]
    params = DFlashParams(max_tokens=a.max_tokens)
    draft = random_draft(draft_config_for(target, num_layers=a.draft_layers), seed=1, dtype=dtype)
    generator = DFlashGenerator.from_models(target, draft)
    plain_generate(target, prompt, DFlashParams(max_tokens=8))  # warm-up
    plain = plain_generate(target, prompt, DFlashParams(max_tokens=a.max_tokens + 16))
    cont = plain.tokens
    plain = plain_generate(target, prompt, params)
    plain_tps = len(plain.tokens) / (plain.total_s - plain.prefill_s)
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    runs = [("random", generator)] + [
        (
            f"tau={t}",
            DFlashGenerator(generator.target, SimulatedDrafter(generator.drafter, prompt, cont, t)),
        )
        for t in (int(x) for x in a.taus.split(","))
    ]
    for name, gen in runs:
        gen.generate(prompt, DFlashParams(max_tokens=8)).run()  # warm-up
        run = gen.generate(prompt, params)
        start = time.perf_counter()
        tokens = run.run()
        s = run.stats
        decode_tps = len(tokens) / s.decode_s if s.decode_s else 0.0
        line = {
            "bench": "dflash",
            "git": sha,
            "device": str(mx.default_device()),
            "host": platform.node(),
            "shape": a.shape,
            "dtype": a.dtype,
            "draft": name,
            "prompt_tokens": a.prompt_tokens,
            "max_tokens": a.max_tokens,
            "identical": tokens == plain.tokens,
            "acceptance_length": s.acceptance_length,
            "plain_decode_tps": plain_tps,
            "dflash_decode_tps": decode_tps,
            "speedup": decode_tps / plain_tps,
            "cycles": s.num_cycles,
            "draft_s": s.draft_s,
            "verify_s": s.verify_s,
            "rollback_s": s.rollback_s,
            "prefill_s": s.prefill_s,
            "wall_s": time.perf_counter() - start,
        }
        print(json.dumps(line), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()

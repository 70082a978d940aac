"""Host time of one batched decode step, by batch size: where the per-row cost goes.

    python benchmarks/decode_step_host.py [--rows 1,16,64,256] [--layers 36] [--steps 40]
        [--profile 64] [--out FILE]

On the H200 the decode step is host-bound (serving_scale_h200.md: ~15 ms a step at one
row plus ~0.13 ms per row). This isolates the host side on any machine: a random Qwen3
of the 8B model's depth but tiny width and vocabulary, so the device work is negligible
and what grows with the batch is Python and graph building. It times mlx-lm's stock
BatchGenerator and omlx's FusedJoinBatchGenerator over the same decode, and with
`--profile N` prints cProfile's top functions for N rows (omlx's generator).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import time

import mlx.core as mx
from mlx_lm.generate import BatchGenerator
from mlx_lm.models import qwen3

from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator


def build(layers: int, vocab: int) -> qwen3.Model:
    args = qwen3.ModelArgs(
        model_type="qwen3",
        hidden_size=64,
        num_hidden_layers=layers,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        vocab_size=vocab,
        max_position_embeddings=4096,
        rope_theta=1e6,
        tie_word_embeddings=True,
    )
    model = qwen3.Model(args)
    mx.eval(model.parameters())
    return model


def step_ms(gen_cls, model, rows: int, steps: int, vocab: int) -> float:
    gen = gen_cls(model, max_tokens=steps + 20, completion_batch_size=rows, prefill_batch_size=rows)
    prompts = [[(7 * r + i) % (vocab - 1) + 1 for i in range(32)] for r in range(rows)]
    gen.insert(prompts, max_tokens=[steps + 20] * rows)
    # Prefill, then a few steps with every row decoding, then time whole steps.
    warm = 0
    while warm < 5:
        if len(_generated(gen.next())) == rows:
            warm += 1
    start = time.perf_counter()
    for _ in range(steps):
        gen.next()
    elapsed = time.perf_counter() - start
    gen.close()
    return 1000 * elapsed / steps


def _generated(out):
    # mlx-lm 0.32 returns (prompt responses, generation responses).
    return out[1] if isinstance(out, tuple) else out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,16,64,256")
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    model = build(args.layers, args.vocab)
    for rows in [int(r) for r in args.rows.split(",")]:
        stock = step_ms(BatchGenerator, model, rows, args.steps, args.vocab)
        ours = step_ms(FusedJoinBatchGenerator, model, rows, args.steps, args.vocab)
        row = {
            "bench": "decode_step_host",
            "rows": rows,
            "layers": args.layers,
            "vocab": args.vocab,
            "stock_ms": round(stock, 3),
            "omlx_ms": round(ours, 3),
            "device": str(mx.default_device()),
            "machine": platform.machine(),
        }
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        step_ms(FusedJoinBatchGenerator, model, args.profile, args.steps, args.vocab)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()

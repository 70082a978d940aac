"""Time a draft training step as the GPU recipe runs it, once the target's states are cached.

    python benchmarks/draft_train_step.py [--data FILE] [--sequences 8] [--batch 4]
        [--epochs 3] [--cache-dtype float32] [--label NAME] [--out FILE]

The default model as the target (float32), the first SEQUENCES training sequences of a
distilled data file (default: the carried one), the recipe's draft (4 layers, MLP 1536,
target layers 1, 10, 18, 27, blocks of 16, 32 anchors a sequence) and its options (soft
labels, cached target states, the 99 % draft vocabulary). Epoch one fills the cache;
the mean step time of the later epochs is the figure, with the attention's share of it
(the draft's `_attend`, forward and backward, timed alone on one batch). One JSON line.

For an A/B of two trees, run it under each with PYTHONPATH set to the tree, e.g.
`git worktree add /tmp/before HEAD~1` and `PYTHONPATH=/tmp/before python
benchmarks/draft_train_step.py --label before`, alternating, in one session.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from carried_data import DATA, read_carried


def main() -> None:
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--cache-dtype", default="float32", help="bfloat16 on an 80 GB GPU")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import mlx.core as mx
    from model_dirs import default_model_dir

    from omlx.draft.train import objective
    from omlx.draft.train.sizing import draft_config
    from omlx.draft.train.trainer import TrainConfig, Trainer
    from omlx.loadgen.server_process import emit_json_line, run_facts
    from omlx.mlx_lm_compat import load

    samples = [s for s in read_carried(args.data) if s.split == "train"][: args.sequences]
    model, _ = load(str(default_model_dir()))
    per_epoch = -(-len(samples) // args.batch)
    cfg = TrainConfig(
        steps=args.epochs * per_epoch, batch_size=args.batch, anchors_per_seq=32,
        eval_every=10**9, checkpoint_every=0, cache_context=True, labels="soft",
        vocab_coverage=0.99, cache_dtype=args.cache_dtype,
    )  # fmt: skip
    shape = draft_config(
        model, num_layers=4, intermediate_size=1536, block_size=16,
        target_layer_ids=(1, 10, 18, 27),
    )  # fmt: skip
    out = Path(tempfile.mkdtemp(prefix="omlx-step-"))
    trainer = Trainer(model, shape, samples, samples[:4], cfg, out)
    times: list[float] = []
    batch = None
    for _ in range(args.epochs * per_epoch):
        batch = trainer._batch(trainer._next_samples(), trainer.rng)
        t0 = time.perf_counter()
        trainer.train_step(batch)
        times.append(time.perf_counter() - t0)
    later = times[per_epoch:]

    # The attention alone: the first layer's, over the last batch's blocks and states.
    assert batch is not None
    hidden, batch = trainer._target_outputs(batch)
    draft = trainer.draft
    ctx = draft.hidden_norm(draft.fc(hidden.astype(draft.fc.weight.dtype)))
    n, k, b = batch.block_ids.shape
    x = trainer.adapter.embed(batch.block_ids).reshape(n * k, b, -1)
    mx.eval(ctx, x)
    attn = draft.layers[0].self_attn

    def attention_sum(x: mx.array, ctx: mx.array) -> mx.array:
        return objective._attend(attn, x, ctx, batch.anchors).sum()

    grad = mx.grad(attention_sum, argnums=(0, 1))
    mx.eval(grad(x, ctx))
    t0 = time.perf_counter()
    for _ in range(3):
        mx.eval(grad(x, ctx))
    attention_s = (time.perf_counter() - t0) / 3
    emit_json_line(
        {
            "bench": "draft_train_step",
            **run_facts(),
            "label": args.label,
            "device": str(mx.default_device()),
            "sequences": len(samples),
            "batch": args.batch,
            "width": int(batch.tokens.shape[1]),
            "fill_step_s": round(sum(times[:per_epoch]) / per_epoch, 3),
            "step_s": round(sum(later) / len(later), 3),
            "attention_layer_fwd_bwd_s": round(attention_s, 3),
        },
        args.out,
    )


if __name__ == "__main__":
    main()

"""Draft training settings side by side: same data, seed and schedule, one setting apart.

    python benchmarks/draft_init_ab.py [--data FILE] [--sequences 64] [--eval 8] [--steps 64]
        [--batch 8] [--anchors 16] [--arms random,target] [--out FILE]

The default model as the target (float32), the first SEQUENCES training sequences of a
distilled data file (default: the carried one) and its first EVAL held-out greedy ones, a
4-layer draft with blocks of 16, cached target states. Every arm trains the same steps
from the same seed and schedule; the arms (ARMS below):

- random / target: random weights against `init_from_target`, no draft vocabulary;
- full / vocab: a draft vocabulary (99% coverage, so the walked τ drafts through it, as
  decoding does), the loss's softmax over the whole vocabulary against `vocab_loss`.

One JSON line per evaluation (held-out loss, walked τ, block-mean τ, per-position
accuracy, training seconds so far) and arm. The held-out loss of a `vocab` arm is over its
vocabulary's softmax, so compare τ across those two, not loss.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from carried_data import DATA, read_carried

ARMS = {
    "random": {"vocab_coverage": 1.0},
    "target": {"vocab_coverage": 1.0, "init_from_target": True},
    "full": {"vocab_coverage": 0.99},
    "vocab": {"vocab_coverage": 0.99, "vocab_loss": True},
}


def main() -> None:
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--eval", type=int, default=8)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--anchors", type=int, default=16)
    ap.add_argument("--lr", type=float, default=8e-4)
    ap.add_argument("--arms", default="random,target")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import mlx.core as mx
    from model_dirs import default_model_dir

    from omlx.draft.train.sizing import draft_config
    from omlx.draft.train.trainer import TrainConfig, Trainer
    from omlx.loadgen.server_process import emit_json_line, run_facts
    from omlx.mlx_lm_compat import load

    work = Path(tempfile.mkdtemp(prefix="omlx-init-"))
    samples = read_carried(args.data)
    train = [s for s in samples if s.split == "train"][: args.sequences]
    held_out = [s for s in samples if s.split == "heldout" and s.greedy][: args.eval]
    model, _ = load(str(default_model_dir()))
    for arm in args.arms.split(","):
        settings = ARMS[arm]
        init = bool(settings.get("init_from_target"))
        cfg = TrainConfig(
            steps=args.steps, batch_size=args.batch, anchors_per_seq=args.anchors,
            lr=args.lr, eval_every=max(1, args.steps // 4), eval_sequences=len(held_out),
            checkpoint_every=0, cache_context=True, save_dtype="float32", **settings,
        )  # fmt: skip
        shape = draft_config(model, num_layers=4, block_size=16, rope_from_target=init)
        trainer = Trainer(model, shape, train, held_out, cfg, work / arm)
        trainer.run()
        seen: set[int] = set()
        for record in trainer.state.history:
            if record["kind"] != "eval" or record["step"] in seen:
                continue  # the last step's evaluation is recorded twice
            seen.add(record["step"])
            emit_json_line(
                {
                    "bench": "draft_init_ab",
                    **run_facts(),
                    "device": str(mx.default_device()),
                    "arm": arm,
                    "draft_vocab": len(trainer.vocab_ids) if trainer.vocab_ids else None,
                    "sequences": len(train),
                    "eval_sequences": len(held_out),
                    "batch": args.batch,
                    "anchors": args.anchors,
                    "lr": args.lr,
                    **record,
                },
                args.out,
            )


if __name__ == "__main__":
    main()

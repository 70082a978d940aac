"""Draft training steps with and without the cached target states (`--cache-context`).

    python benchmarks/draft_train_cache.py [--data FILE] [--sequences 64] [--batch 8] [--out FILE]

The default model as the target (float32), the first SEQUENCES training sequences of a
distilled data file (default: the carried one), a 4-layer draft with blocks of 16 and 32
anchors a sequence. Each mode trains two epochs from the same seed; per epoch the mean
step time. Epoch one is the same work in both modes (the cache fills); epoch two is the
comparison. One JSON line per mode.
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
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import mlx.core as mx
    from model_dirs import default_model_dir

    from omlx.draft.train.sizing import draft_config
    from omlx.draft.train.trainer import TrainConfig, Trainer
    from omlx.loadgen.server_process import emit_json_line, run_facts
    from omlx.mlx_lm_compat import load

    work = Path(tempfile.mkdtemp(prefix="omlx-cache-"))
    samples = [s for s in read_carried(args.data) if s.split == "train"][: args.sequences]
    model, _ = load(str(default_model_dir()))
    steps_per_epoch = -(-len(samples) // args.batch)
    for cache in (False, True):
        cfg = TrainConfig(
            steps=2 * steps_per_epoch, batch_size=args.batch, anchors_per_seq=32,
            eval_every=10**9, checkpoint_every=0, cache_context=cache,
        )  # fmt: skip
        shape = draft_config(model, num_layers=4, block_size=16)
        trainer = Trainer(model, shape, samples, samples[:8], cfg, work / f"d{cache}")
        times: list[float] = []
        for _ in range(2 * steps_per_epoch):
            batch = trainer._batch(trainer._next_samples(), trainer.rng)
            t0 = time.perf_counter()
            trainer.train_step(batch)
            times.append(time.perf_counter() - t0)
        first, second = times[:steps_per_epoch], times[steps_per_epoch:]
        row = {
            "bench": "draft_train_cache",
            **run_facts(),
            "device": str(mx.default_device()),
            "cache_context": cache,
            "sequences": len(samples),
            "batch": args.batch,
            "epoch1_step_s": round(sum(first) / len(first), 3),
            "epoch2_step_s": round(sum(second) / len(second), 3),
        }
        emit_json_line(row, args.out)


if __name__ == "__main__":
    main()

"""A few seconds of draft training on a tiny random target: does every op run here?

    python -m benchmarks.dflash_train_smoke [--steps 30]

Meant for a new device (a GPU backend) before a long run: the target writes replies
through the batch generator, the draft trains (forward, backward, AdamW), and DFlash
decodes with it, output checked against plain decoding. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import tempfile
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map

from omlx.draft.baseline import plain_generate
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.model import load_draft
from omlx.draft.train.data import GenerationSettings, Sample, generate_replies
from omlx.draft.train.sizing import draft_config
from omlx.draft.train.trainer import TrainConfig, Trainer

TINY_QWEN3 = {
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    module = importlib.import_module("mlx_lm.models.qwen3")
    mx.random.seed(0)
    target = module.Model(module.ModelArgs.from_dict(TINY_QWEN3))
    for layer in target.model.layers:  # varied continuations (tests/mlx/draft/conftest.py)
        layer.update(tree_map(lambda w: w * 4 if w.ndim == 2 else w, layer.parameters()))
    mx.eval(target.parameters())
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(0, 255, 8)] for _ in range(16)]
    start = time.perf_counter()
    replies = generate_replies(target, prompts, [], GenerationSettings(max_new_tokens=32))
    samples = [
        Sample(str(i), "smoke", "train", True, tuple(p), tuple(r))
        for i, (p, r) in enumerate(zip(prompts, replies, strict=True))
    ]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(
            steps=args.steps, batch_size=8, anchors_per_seq=16, lr=3e-3,
            eval_every=args.steps, checkpoint_every=0, save_dtype="float32",
        )  # fmt: skip
        trainer = Trainer(target, draft_config(target, num_layers=2, block_size=8),
                          samples, samples[:8], cfg, Path(tmp))  # fmt: skip
        result = trainer.run()
        draft = load_draft(tmp)
    generator = DFlashGenerator.from_models(target, draft)
    run = generator.generate(prompts[0], DFlashParams(max_tokens=32))
    tokens = run.run()
    plain = plain_generate(target, prompts[0], DFlashParams(max_tokens=32)).tokens
    print(json.dumps({
        "device": str(mx.default_device()),
        "first_eval": result["first"],
        "final_eval": result["final"],
        "loop_tau": run.stats.acceptance_length,
        "identical": tokens == plain,
        "seconds": round(time.perf_counter() - start, 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()

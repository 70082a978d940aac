"""How much of the target's next-token probability its top k tokens hold, along replies.

    python benchmarks/target_top_mass.py [--data FILE] [--sequences 10] [--seed 0]
        [--out FILE]

Why: `draft train --labels soft` keeps the target's distribution as its top
objective.SOFT_TOP_K tokens. The default model (float32, as `omlx serve` computes it on a
CPU) reads SEQUENCES replies drawn at random from a distilled data file (default: the
carried one, greedy and sampled replies alike) and, at every reply position, reports the
mass of its top 1 / 4 / 8 / 16 tokens, overall and where its top token holds less than
half. One JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from carried_data import DATA

TOPS = (1, 4, 8, 16)


def main() -> None:
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--sequences", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import mlx.core as mx
    import numpy as np
    from model_dirs import default_model_dir

    from omlx.loadgen.server_process import emit_json_line
    from omlx.mlx_lm_compat import load
    from omlx.platform.cpu_precision import compute_in_float32

    path = default_model_dir()
    model, _ = load(str(path))
    compute_in_float32(model, "auto", str(path))
    opener = gzip.open if args.data.suffix == ".gz" else open
    with opener(args.data, "rt") as f:
        lines = f.readlines()
    chosen = np.random.default_rng(args.seed).choice(len(lines), args.sequences, replace=False)
    cumulative = []
    for i in chosen:
        sample = json.loads(lines[i])
        ids = sample["prompt_ids"] + sample["reply_ids"]
        logits = model(mx.array(ids)[None]).astype(mx.float32)
        # The distribution before each reply token: positions prompt-1 .. end-1.
        probs = np.array(mx.softmax(logits, axis=-1)[0, len(sample["prompt_ids"]) - 1 : -1])
        cumulative.append(np.cumsum(-np.sort(-probs, axis=-1)[:, : max(TOPS)], axis=-1))
    mass = np.concatenate(cumulative)
    unsure = mass[:, 0] < 0.5
    record = {
        "data": args.data.name,
        "sequences": args.sequences,
        "positions": len(mass),
        "top1_at_least_0.9": round(float((mass[:, 0] >= 0.9).mean()), 3),
        "top1_under_0.5": round(float(unsure.mean()), 3),
    }
    for k in TOPS:
        record[f"top{k}_mean"] = round(float(mass[:, k - 1].mean()), 3)
        record[f"top{k}_median"] = round(float(np.median(mass[:, k - 1])), 3)
        record[f"top{k}_p10"] = round(float(np.percentile(mass[:, k - 1], 10)), 3)
        record[f"top{k}_mean_where_top1_under_0.5"] = round(float(mass[unsure, k - 1].mean()), 3)
    emit_json_line(record, args.out)


if __name__ == "__main__":
    main()

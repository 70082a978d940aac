"""How fast the target writes its distillation replies, by how new prompts join the batch.

    python -m benchmarks.distill_rate [--model DIR] [--prompts 512] [--batch 256]
        [--joins 1,32] [--max-tokens 256] [--temperature 0.7] [--out FILE]

`omlx draft train`'s data generation (data.generate_replies) over the first --prompts
shipped training prompts, once per `join_rows` value (`--gen-join`): 1 refills a freed
row at once (one or two prompts prefilled beside every decode step), larger waits until
that many rows are free and prefills them together. Same prompts, seed and sampling in
every arm, the arms alternating when --repeats > 1. One JSON line per arm and repeat:
reply tokens per second, replies, wall time, device.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

import mlx.core as mx

from omlx.draft.train.data import GenerationSettings, generate_replies
from omlx.draft.train.prompts import encode, read_prompt_file, select


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="target folder (default: the default model)")
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--joins", default="1,32")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default=None, help="append JSON lines here")
    args = ap.parse_args()
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()  # the BLAS `omlx draft train` runs on; a no-op on CUDA
    from omlx.mlx_lm_compat import load

    if args.model is None:
        from benchmarks.model_dirs import default_model_dir

        model_dir = default_model_dir()
    else:
        model_dir = Path(args.model)
    model, tokenizer = load(str(model_dir))
    records = select(read_prompt_file(), split="train")
    random.Random(0).shuffle(records)  # every category, as a data run's chunks
    prompts = [encode(tokenizer, r) for r in records[: args.prompts]]
    eos = list(tokenizer.eos_token_ids)
    joins = [int(j) for j in args.joins.split(",")]
    # Warm-up: kernels and caches of both prefill widths, outside the timed arms.
    for join in joins:
        settings = GenerationSettings(max_new_tokens=8, batch_size=args.batch, join_rows=join)
        generate_replies(model, prompts[: 2 * args.batch], eos, settings, temperature=0.0)
    for repeat in range(args.repeats):
        for join in joins if repeat % 2 == 0 else joins[::-1]:
            settings = GenerationSettings(
                max_new_tokens=args.max_tokens, batch_size=args.batch, join_rows=join
            )
            mx.random.seed(0)
            start = time.perf_counter()
            replies = generate_replies(model, prompts, eos, settings, temperature=args.temperature)
            wall = time.perf_counter() - start
            tokens = sum(len(r) for r in replies)
            row = {
                "bench": "distill_rate",
                "model": model_dir.name,
                "join_rows": join,
                "batch": args.batch,
                "prompts": len(prompts),
                "repeat": repeat,
                "reply_tokens": tokens,
                "wall_s": round(wall, 2),
                "tok_s": round(tokens / wall, 1),
                "device": str(mx.default_device()),
                "machine": platform.machine(),
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "command": " ".join(sys.argv),
            }
            line = json.dumps(row)
            print(line, flush=True)
            if args.out:
                with Path(args.out).open("a") as f:
                    f.write(line + "\n")


if __name__ == "__main__":
    main()

"""Continuous batching under staggered traffic: sequences join and leave every few steps.

    python benchmarks/staggered_decode.py [--model DIR] [--prompts 48] [--batch 16]
        [--prompt-tokens 100] [--max-tokens 16-64] [--rounds 2] [--out FILE]

omlx's FusedJoinBatchGenerator (what the engine runs) decodes --prompts random prompts
greedily, at most --batch at a time, each with its own max_tokens drawn from the range,
so rows finish at different steps and queued prompts take their slots. Two variants,
rounds interleaved: `slot` (the default: rows leave and join in place, SlotKVCache) and
`copy` (mlx-lm's BatchKVCache: every leave and join copies the whole cache). Aggregate
generated tokens/s, wall time including prefill; the same tokens either way (checked).
One JSON line per variant and round (--out appends).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="")
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=100)
    ap.add_argument("--max-tokens", default="16-64")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()
    import mlx.core as mx
    from model_dirs import default_model_dir

    from omlx.engine.api import SamplingParams
    from omlx.engine.sampling import make_sampler
    from omlx.mlx_lm_compat import load
    from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator, PrimedGenerationBatch

    model_dir = Path(args.model) if args.model else default_model_dir()
    model, _ = load(str(model_dir))
    vocab = int(model.args.vocab_size)
    rng = random.Random(0)
    low, high = (int(x) for x in args.max_tokens.split("-"))
    prompts = [
        [rng.randrange(vocab) for _ in range(args.prompt_tokens)] for _ in range(args.prompts)
    ]
    limits = [rng.randint(low, high) for _ in prompts]
    sampler = make_sampler(SamplingParams(temperature=0.0), vocab)
    adopt = PrimedGenerationBatch._adopt_slot_caches

    def run(variant: str) -> tuple[float, int, list[list[int]]]:
        PrimedGenerationBatch._adopt_slot_caches = (
            adopt if variant == "slot" else lambda self: False
        )
        gen = FusedJoinBatchGenerator(
            model, completion_batch_size=args.batch, prefill_batch_size=min(8, args.batch)
        )
        try:
            t0 = time.perf_counter()
            uids = gen.insert(prompts, max_tokens=limits, samplers=[sampler] * len(prompts))
            out: dict[int, list[int]] = {u: [] for u in uids}
            done = 0
            while done < len(uids):
                for r in gen.next_generated():
                    out[r.uid].append(r.token)
                    done += r.finish_reason is not None
            return (
                time.perf_counter() - t0,
                sum(len(v) for v in out.values()),
                [out[u] for u in uids],
            )
        finally:
            gen.close()
            PrimedGenerationBatch._adopt_slot_caches = adopt

    reference = None
    for round_index in range(args.rounds):
        for variant in ("copy", "slot") if round_index % 2 == 0 else ("slot", "copy"):
            wall, tokens, outputs = run(variant)
            reference = reference or outputs
            line = {
                "bench": "staggered_decode",
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "machine": platform.machine(),
                "device": str(mx.default_device()),
                "model": model_dir.name,
                "variant": variant,
                "round": round_index,
                "prompts": args.prompts,
                "batch": args.batch,
                "prompt_tokens": args.prompt_tokens,
                "max_tokens": args.max_tokens,
                "wall_s": round(wall, 2),
                "tokens": tokens,
                "tok_s": round(tokens / wall, 2),
                "same_tokens": outputs == reference,
                "command": " ".join(sys.orig_argv),
            }
            print(json.dumps(line), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(line) + "\n")
            mx.clear_cache()


if __name__ == "__main__":
    main()

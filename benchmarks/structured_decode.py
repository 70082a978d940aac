"""What constrained rows cost a batch: decode tok/s of 16 rows with 0, 1, 8 and 16 under a grammar.

    python benchmarks/structured_decode.py [--model DIR] [--batch 16] [--steps 48] [--rounds 3]
                                           [--smoke] [--json OUT]
    # GPU: a random-weight Qwen3 shape (dflash_bench.SHAPES) with a tokenizer folder
    python benchmarks/structured_decode.py --shape qwen3-8b --tokenizer TOKDIR --json OUT

The engine's own decode path (omlx's batch generator and MLX backend, the same logits
processors a request gets), driven step by step without the server: every row decodes
the same prompt at temperature 1, and constrained rows follow a JSON Schema that cannot
close within the run (an array of at least 1000 records with strings, enums, bounded
numbers), so every row stays in the batch for every measured step. Reported per count of
constrained rows: aggregate decode tok/s, the step time against 0 constrained rows, and
the CPU time of the grammar work (llguidance matcher advance + mask fill) per step.
Configurations alternate within each round; the best round of each is kept (shared CPUs).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from model_dirs import default_model_dir, tiny_model_dir

SCHEMA = {
    "type": "array",
    "minItems": 1000,
    "items": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 0},
            "name": {"type": "string"},
            "role": {"enum": ["admin", "user", "guest"]},
            "score": {"type": "number", "minimum": 0, "maximum": 100},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["id", "name", "role", "score", "tags"],
        "additionalProperties": False,
    },
}
PROMPT = "List the users of our web shop as JSON records."


class TimedRow:
    """A RowMatcher whose advance and mask fill are timed (the grammar's CPU work)."""

    def __init__(self, row: Any, clock: list[float]) -> None:
        self._row, self._clock = row, clock

    @property
    def num_consumed(self) -> int:
        return self._row.num_consumed

    def consume(self, tokens: list[int]) -> None:
        t = time.perf_counter()
        self._row.consume(tokens)
        self._clock[0] += time.perf_counter() - t

    def fill(self) -> Any:
        t = time.perf_counter()
        words = self._row.fill()
        self._clock[0] += time.perf_counter() - t
        return words


def run_config(lm: Any, backend: Any, compiled: Any, ids: list[int], args: Any, k: int) -> dict:
    import mlx.core as mx

    from omlx.engine.api import SamplingParams

    params = SamplingParams(temperature=1.0)
    clock = [0.0]
    gen = backend.new_generator(lm)
    vocab = lm.spec.vocab_size or len(lm.tokenizer)
    processors = [
        backend.logits_processors(
            params,
            len(ids),
            None,
            grammar=TimedRow(compiled.matcher(), clock) if i < k else None,
        )
        for i in range(args.batch)
    ]
    gen.insert_segments(
        [[list(ids)] for _ in range(args.batch)],
        max_tokens=[args.warmup + args.steps + 8] * args.batch,
        samplers=[backend.sampler(params, vocab)] * args.batch,
        logits_processors=processors,
    )
    while not any(r for r in gen.next()[1]):  # prefill until the first tokens come out
        pass
    for _ in range(args.warmup):
        gen.next()
    mx.synchronize()
    clock[0] = 0.0
    t0 = time.perf_counter()
    num = 0
    for _ in range(args.steps):
        num += len(gen.next()[1])
    mx.synchronize()
    wall = time.perf_counter() - t0
    gen.close()
    return {
        "tok_s": num / wall,
        "step_ms": 1000 * wall / args.steps,
        "grammar_ms": 1000 * clock[0] / args.steps,
    }


def shaped_model(shape: str, tokenizer_dir: Path | None) -> Any:
    """A random-weight Qwen3 model of a real shape in bf16 (no weights of that size ship
    offline), with a real tokenizer; its logits are wider than the tokenizer's vocabulary,
    and the grammar never allows the extra ids."""
    import mlx.core as mx
    from dflash_bench import SHAPES, build_target
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from omlx.engine.loading import LoadedModel
    from omlx.engine.text.templating import ModelSpec

    assert tokenizer_dir is not None, "--shape needs --tokenizer DIR"
    model = build_target(shape, mx.bfloat16)
    tokenizer = load_tokenizer(tokenizer_dir)
    vocab = SHAPES[shape]["vocab_size"]
    spec = ModelSpec(shape, model_type="qwen3", vocab_size=vocab)
    return LoadedModel(model, tokenizer, spec, frozenset(tokenizer.eos_token_ids), 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--shape", help="random-weight Qwen3 shape of dflash_bench (bf16)")
    ap.add_argument("--tokenizer", type=Path, help="tokenizer folder for --shape")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--constrained", default="0,1,8,16")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.warmup, args.rounds = 8, 2, 1
    import mlx.core as mx

    from omlx.engine.constraints import Grammar, GrammarCompiler, json_rule
    from omlx.engine.mlx_backend import MLXBackend
    from omlx.settings import EngineSettings

    backend = MLXBackend(EngineSettings(max_running=args.batch, prefill_batch_size=args.batch))
    if args.shape:
        lm, model_dir = shaped_model(args.shape, args.tokenizer), Path(args.shape)
    else:
        model_dir = args.model or (tiny_model_dir() if args.smoke else default_model_dir())
        lm = backend.load("bench", model_dir)
    vocab = lm.spec.vocab_size or len(lm.tokenizer)
    t = time.perf_counter()
    compiler = GrammarCompiler.for_tokenizer(lm.tokenizer, vocab, sorted(lm.eos_token_ids))
    setup_s = time.perf_counter() - t
    compiled = compiler.compile(Grammar(f"start: {json_rule(SCHEMA)}\n", "response_format"))
    if getattr(lm.tokenizer, "chat_template", None):
        ids = lm.tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPT}], add_generation_prompt=True
        )
    else:  # a base model (Gemma-3-270M)
        ids = lm.tokenizer.encode(PROMPT)
    counts = [int(c) for c in args.constrained.split(",")]
    best: dict[int, dict] = {}
    for _ in range(args.rounds):
        for k in counts:
            r = run_config(lm, backend, compiled, ids, args, k)
            if k not in best or r["tok_s"] > best[k]["tok_s"]:
                best[k] = r
    base = best[counts[0]]["step_ms"]
    rows = [
        {
            "constrained": k,
            "tok_s": round(r["tok_s"], 1),
            "step_ms": round(r["step_ms"], 2),
            "step_vs_none": round(r["step_ms"] / base, 3),
            "grammar_cpu_ms_per_step": round(r["grammar_ms"], 3),
            "grammar_share_of_step": round(r["grammar_ms"] / r["step_ms"], 4),
        }
        for k, r in best.items()
    ]
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    out = {
        "bench": "structured_decode",
        "git": sha.stdout.strip(),
        "device": str(mx.default_device()),
        "machine": platform.machine(),
        "model": model_dir.name,
        "vocab": vocab,
        "batch": args.batch,
        "steps": args.steps,
        "rounds": args.rounds,
        "grammar_setup_s": round(setup_s, 2),
        "rows": rows,
    }
    print(json.dumps(out), flush=True)
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()

"""A trained DFlash draft against plain decoding, per prompt category, in one run.

    python -m benchmarks.dflash_trained --draft DIR [--model DIR] [--per-category 8]
        [--max-tokens 128] [--temperatures 0,0.7] [--block-sizes 16] [--out FILE]

Prompts are the held-out split of the shipped training prompts (never trained on),
one row per (temperature, block size, category) plus an "all" row. Every prompt is
decoded plainly (mlx-lm's generate_step) and then with DFlash, side by side; greedy
rows say whether every DFlash output equals the plain one. A second, shorter pass with
`sync_phases` gives the per-cycle time split (draft, verify, rollback) as the device
sees it; the timed pass overlaps draft and verify as serving does.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import mlx.core as mx

from omlx.draft.bench import BenchReport, compare, make_draft
from omlx.draft.loop import DFlashParams
from omlx.draft.train.prompts import encode, read_prompt_file, select

CATEGORIES = ("chat", "code", "maths", "instructions")


def _merge(reports: list[BenchReport]) -> BenchReport:
    total = BenchReport(reports[0].temperature, reports[0].draft_block_size)
    for r in reports:
        total.num_prompts += r.num_prompts
        total.plain_tokens += r.plain_tokens
        total.plain_s += r.plain_s
        total.dflash_tokens += r.dflash_tokens
        total.dflash_s += r.dflash_s
        total.identical &= r.identical
        total.acceptance_lengths += r.acceptance_lengths
        for phase in ("draft_s", "verify_s", "rollback_s", "prefill_s"):
            setattr(total, phase, getattr(total, phase) + getattr(r, phase))
    return total


def _row(report: BenchReport, profile: BenchReport | None, **extra: Any) -> dict[str, Any]:
    row = {**extra, **report.to_dict()}
    row.pop("acceptance_histogram")
    cycles = max(1, len(report.acceptance_lengths))
    row["dflash_ms_per_cycle"] = 1000 * (report.dflash_s - report.prefill_s) / cycles
    row["plain_ms_per_token"] = 1000 * report.plain_s / max(1, report.plain_tokens)
    if profile is not None and profile.acceptance_lengths:
        n = len(profile.acceptance_lengths)
        row["profile_ms_per_cycle"] = {
            "draft": 1000 * profile.draft_s / n,
            "verify": 1000 * profile.verify_s / n,
            "rollback": 1000 * profile.rollback_s / n,
            "cycles": n,
        }
    return row


def _git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="target folder (default: the default model)")
    ap.add_argument("--draft", required=True)
    ap.add_argument("--per-category", type=int, default=8)
    ap.add_argument("--profile-prompts", type=int, default=2, help="per category; 0: none")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperatures", default="0,0.7")
    ap.add_argument("--block-sizes", default="16")
    ap.add_argument("--categories", default=",".join(CATEGORIES))
    ap.add_argument("--sampled-drafts", action="store_true", help="T > 0: also sampled drafts")
    ap.add_argument(
        "--loops",
        default="pipelined",
        help="DFlash loops to time, one row set each: pipelined (the default: each "
        "verify read before the next is queued), async (pipelined cycles queued before "
        "the last is read, omlx/draft/async_loop.py), sequential",
    )
    ap.add_argument(
        "--fused-projections",
        action="store_true",
        help="the target's q/k/v and gate/up as one matmul each, as `omlx serve` loads "
        "it on CUDA (engine.fused_projections)",
    )
    ap.add_argument(
        "--row-gemv",
        action="store_true",
        help="the target's and the draft's small linears and few-query attention compute a "
        "few rows as batched gemvs (omlx/mlx_lm_compat/row_gemv.py, row_attention.py): on "
        "CUDA, no cuBLASLt capture per matmul",
    )
    ap.add_argument(
        "--attention-kernel",
        action="store_true",
        help="the target's attention of 1-16 queries and the draft's block attention as "
        "omlx's custom CUDA kernel (engine.decode_attention = kernel, "
        "omlx/mlx_lm_compat/attention_kernel.py); after --row-gemv's, so it takes the "
        "verify's attention first",
    )
    ap.add_argument(
        "--kernel-block",
        type=int,
        default=0,
        help="with --attention-kernel: query vectors a block for calls of several queries "
        "(attention_kernel.MULTI_QUERY_BLOCK; 0: the module's default)",
    )
    ap.add_argument(
        "--fresh-views",
        action="store_true",
        help="with --row-gemv: build the weights' and inputs' views in every call, as "
        "before the twentieth session (row_gemv.KEEP_VIEWS off), to compare on one machine",
    )
    ap.add_argument("--out", default=None, help="append JSON lines here")
    args = ap.parse_args()
    from omlx.platform.blas import reexec_with_blas

    reexec_with_blas()  # the BLAS `omlx serve` runs on; a no-op on CUDA

    from omlx.mlx_lm_compat import load

    if args.model is None:
        from benchmarks.model_dirs import default_model_dir

        model_dir = default_model_dir()
    else:
        model_dir = Path(args.model)
    model, tokenizer = load(str(model_dir))
    if args.fused_projections:
        from omlx.mlx_lm_compat.fused_projections import fuse_projections

        fuse_projections(model)
    draft = make_draft(model, args.draft)  # in the target's dtype
    if args.row_gemv:
        from omlx.mlx_lm_compat import row_gemv

        row_gemv.KEEP_VIEWS = not args.fresh_views
        row_gemv.use_row_gemv(model)
        row_gemv.use_row_gemv(draft)
    if args.attention_kernel:
        from omlx.mlx_lm_compat import attention_kernel

        if args.kernel_block:
            attention_kernel.MULTI_QUERY_BLOCK = args.kernel_block
        attention_kernel.use_kernel_attention(model)
        attention_kernel.use_kernel_attention(draft)  # its block attention too
    records = select(read_prompt_file(), split="heldout")
    categories = args.categories.split(",")
    prompts = {
        c: [encode(tokenizer, r) for r in select(records, categories=[c])[: args.per_category]]
        for c in categories
    }
    eos = tuple(tokenizer.eos_token_ids)
    meta = {
        "bench": "dflash_trained",
        "model": model_dir.name,
        "model_dtype": str(model.model.embed_tokens.weight.dtype),
        "fused_projections": args.fused_projections,
        "row_gemv": args.row_gemv,
        "attention_kernel": args.attention_kernel,
        "kernel_block": args.kernel_block or None,
        "fresh_views": args.fresh_views,
        "draft": str(args.draft),
        "max_tokens": args.max_tokens,
        "device": str(mx.default_device()),
        "machine": platform.machine(),
        "git": _git_sha(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": " ".join(sys.argv),
        "mlx_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MLX_")},
    }
    # Full-length warm-ups of both paths per temperature, so kernel compilation stays
    # out of the rows: the sampled path runs kernels the greedy one never does (the
    # twentieth session's first sampled category on an H100 paid them, 27.6 ms a cycle),
    # and its acceptance makes shapes one prompt does not meet (the twenty-first
    # session's chat, timed first, 12.8 ms a cycle against 6.1-6.5): a sampled
    # temperature warms on one prompt of every category.
    for temperature in sorted({float(t) for t in args.temperatures.split(",")} | {0.0}):
        warm = DFlashParams(max_tokens=args.max_tokens, temperature=temperature, eos_token_ids=eos)
        warm_categories = categories if temperature > 0 else categories[:1]
        compare(model, draft, [prompts[c][0] for c in warm_categories], warm)

    def emit(row: dict[str, Any]) -> None:
        line = json.dumps(row)
        print(line, flush=True)
        if args.out:
            with Path(args.out).open("a") as f:
                f.write(line + "\n")

    for temperature in (float(t) for t in args.temperatures.split(",")):
        modes = [True] if temperature == 0 or not args.sampled_drafts else [True, False]
        loops = args.loops.split(",")
        for block, loop, by_argmax in itertools.product(
            (int(b) for b in args.block_sizes.split(",")), loops, modes
        ):
            params = DFlashParams(
                max_tokens=args.max_tokens,
                temperature=temperature,
                draft_by_argmax=by_argmax,
                eos_token_ids=eos,
            )
            reports, profiles = [], []
            for c in categories:
                report = compare(
                    model,
                    draft,
                    prompts[c],
                    params,
                    draft_block_size=block,
                    pipelined=loop != "sequential",
                    queue_ahead=loop == "async",
                )
                profile = None
                if args.profile_prompts:
                    profile = compare(
                        model,
                        draft,
                        prompts[c][: args.profile_prompts],
                        params,
                        draft_block_size=block,
                        sync_phases=True,
                    )
                    profiles.append(profile)
                reports.append(report)
                drafting = "argmax" if by_argmax or temperature == 0 else "sampled"
                rows = [_row(report, profile, category=c, drafting=drafting, loop=loop, **meta)]
                if c == categories[-1]:
                    merged_profile = _merge(profiles) if profiles else None
                    rows.append(
                        _row(
                            _merge(reports),
                            merged_profile,
                            category="all",
                            drafting=drafting,
                            loop=loop,
                            **meta,
                        )
                    )
                for row in rows:
                    emit(row)


if __name__ == "__main__":
    main()

"""Plain decoding against DFlash on the same prompts (what `omlx dflash-bench` runs)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omlx.draft.baseline import plain_generate
from omlx.draft.capture import TargetAdapter
from omlx.draft.config import serving_block_size
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.model import DFlashDraftModel, load_draft
from omlx.draft.random_init import draft_config_for, random_draft
from omlx.errors import InvalidRequest
from omlx.platform.device import on_gpu

DEFAULT_PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain in three sentences why the sky is blue.",
    "List five prime numbers and say why each one is prime.",
    "Summarize the plot of Romeo and Juliet in one paragraph.",
)
RANDOM_DRAFT = "random"


@dataclass(slots=True)
class BenchReport:
    temperature: float
    draft_block_size: int
    num_prompts: int = 0
    plain_tokens: int = 0
    plain_s: float = 0.0
    dflash_tokens: int = 0
    dflash_s: float = 0.0
    identical: bool = True
    acceptance_lengths: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    rollback_s: float = 0.0
    prefill_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        plain_tps = self.plain_tokens / self.plain_s if self.plain_s else 0.0
        dflash_tps = self.dflash_tokens / self.dflash_s if self.dflash_s else 0.0
        tau = (
            sum(self.acceptance_lengths) / len(self.acceptance_lengths)
            if self.acceptance_lengths
            else 0.0
        )
        hist = {n: self.acceptance_lengths.count(n) for n in range(1, self.draft_block_size + 1)}
        return {
            "identical": self.identical,
            "greedy": self.temperature < 1e-5,
            "acceptance_length": tau,
            "acceptance_histogram": hist,
            "speedup": dflash_tps / plain_tps if plain_tps else 0.0,
            "plain_tokens_per_s": plain_tps,
            "dflash_tokens_per_s": dflash_tps,
            "plain_tokens": self.plain_tokens,
            "dflash_tokens": self.dflash_tokens,
            "cycles": len(self.acceptance_lengths),
            "time_split_s": {
                "prefill": self.prefill_s,
                "draft": self.draft_s,
                "verify": self.verify_s,
                "rollback": self.rollback_s,
            },
            "temperature": self.temperature,
            "draft_block_size": self.draft_block_size,
            "num_prompts": self.num_prompts,
            "device": str(mx.default_device()),
        }


def read_prompts(path: str | Path | None) -> list[str]:
    """One prompt per line, or JSON lines with a "prompt" field; the defaults if None."""
    if path is None:
        return list(DEFAULT_PROMPTS)
    try:
        lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise InvalidRequest(f"cannot read prompts file {path}: {exc}") from exc
    prompts = [json.loads(line)["prompt"] if line.startswith("{") else line for line in lines]
    if not prompts:
        raise InvalidRequest(f"prompts file {path} holds no prompts")
    return prompts


def encode_prompt(tokenizer: Any, prompt: str) -> list[int]:
    """Chat-format the prompt when the tokenizer has a template (drafts train on chats)."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": prompt}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        return list(ids if isinstance(ids, list) else tokenizer.encode(ids))
    return list(tokenizer.encode(prompt))


def make_draft(target: nn.Module, draft: str, seed: int = 0) -> DFlashDraftModel:
    """Load a draft folder, or build a random one that fits `target` ("random"), in the
    target's dtype: drafts ship in bfloat16, and a float32 target (the CPU default)
    should not draft in a lower precision than it verifies in."""
    dtype = TargetAdapter(target, ()).dtype
    if draft == RANDOM_DRAFT:
        return random_draft(draft_config_for(target), seed=seed, dtype=dtype)
    return load_draft(draft, dtype=dtype)


def compare(
    model: nn.Module,
    draft: DFlashDraftModel,
    prompts: Sequence[Sequence[int]],
    params: DFlashParams,
    *,
    draft_block_size: int | None = None,
    seed: int = 0,
    sync_phases: bool = False,
    pipelined: bool = True,
    queue_ahead: bool = False,
) -> BenchReport:
    """Generate every prompt plainly and with DFlash; a warm-up pass runs first.

    `sync_phases` waits for the device after each phase, for a time split that is the
    device's (slower: draft and verify no longer overlap); `pipelined=False` keeps
    every cycle sequential (the loop before drafting from unread verifies);
    `queue_ahead` queues each cycle before reading the last (async_loop.py)."""
    generator = DFlashGenerator.from_models(
        model,
        draft,
        draft_block_size=draft_block_size,
        sync_phases=sync_phases,
        pipelined=pipelined,
        queue_ahead=queue_ahead,
    )
    report = BenchReport(params.temperature, generator.drafter.draft_block_size)
    warm = DFlashParams(max_tokens=4, temperature=params.temperature)
    plain_generate(model, prompts[0], warm)
    generator.generate(prompts[0], warm).run()
    for prompt in prompts:
        mx.random.seed(seed)
        plain = plain_generate(model, prompt, params)
        mx.random.seed(seed)
        start = time.perf_counter()
        run = generator.generate(prompt, params)
        tokens = run.run()
        elapsed = time.perf_counter() - start
        report.num_prompts += 1
        report.plain_tokens += len(plain.tokens)
        report.plain_s += plain.total_s
        report.dflash_tokens += len(tokens)
        report.dflash_s += elapsed
        report.identical &= tokens == plain.tokens
        report.acceptance_lengths += run.stats.acceptance_lengths
        report.prefill_s += run.stats.prefill_s
        report.draft_s += run.stats.draft_s
        report.verify_s += run.stats.verify_s
        report.rollback_s += run.stats.rollback_s
    return report


def run_bench(
    model_path: str | Path,
    draft: str,
    *,
    prompts_file: str | None = None,
    max_tokens: int = 128,
    temperature: float = 0.0,
    draft_block_size: int | None = None,
    draft_by_argmax: bool = False,
) -> dict[str, Any]:
    """Load the target and draft, compare plain and DFlash decoding; a JSON-ready dict."""
    from omlx.mlx_lm_compat import load

    model, tokenizer = load(str(model_path))
    texts = read_prompts(prompts_file)
    prompts = [encode_prompt(tokenizer, text) for text in texts]
    params = DFlashParams(
        max_tokens=max_tokens,
        temperature=temperature,
        draft_by_argmax=draft_by_argmax,
        eos_token_ids=tuple(tokenizer.eos_token_ids),
    )
    draft_model = make_draft(model, draft)
    block = draft_block_size or serving_block_size(draft_model.config.block_size, gpu=on_gpu())
    report = compare(model, draft_model, prompts, params, draft_block_size=block)
    return {"model": str(model_path), "draft": draft, **report.to_dict()}

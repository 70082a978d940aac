"""DFlash as the engine's alternative path for single requests (the engine's AltPath seam).

Duck-typed against `omlx.engine.commands.AltPath` (draft may not import the engine):
`wants(prompt, sampling, *, num_running)` and `open(model, prompt_ids, sampling,
max_tokens)`, both called on the engine thread, which also checks EOS, stop strings and
max_tokens on what `open`'s iterator yields. Requests DFlash cannot serve exactly as the
batched path would (several at once, a long context, top-p/top-k/penalties/logit bias/
logprobs/seeds) are left to the batched path.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omlx.draft.bench import make_draft
from omlx.draft.config import serving_block_size
from omlx.draft.grammar import TokenGrammar
from omlx.draft.loop import DFlashGenerator, DFlashParams
from omlx.draft.model import DFlashDraftModel
from omlx.draft.stats import DFlashStats
from omlx.mlx_lm_compat.attention_kernel import kernel_takes_verifies, use_kernel_attention
from omlx.mlx_lm_compat.row_gemv import use_row_gemv, uses_row_gemv
from omlx.platform.device import on_gpu

log = logging.getLogger(__name__)

# The warm-up's prompt length, and its sampled pass's temperature (any above greedy's).
WARM_PROMPT_TOKENS = 8
WARM_TEMPERATURE = 0.7

# SamplingParams fields at these values mean "plain temperature sampling".
_NEUTRAL_SAMPLING = {
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "seed": None,
    "logprobs": False,
    "top_logprobs": 0,
}


class DFlashPath:
    """Serves one request at a time with DFlash; reported as `served_by="dflash"`."""

    name = "dflash"

    def __init__(
        self,
        draft_path: str | Path,
        *,
        draft_block_size: int | None = None,
        max_context_tokens: int = 8192,
        draft_by_argmax: bool = False,
        num_recent_stats: int = 64,
        warm_up: bool | None = None,
    ) -> None:
        self.draft_path = draft_path if str(draft_path) == "random" else Path(draft_path)
        self.draft_block_size = draft_block_size
        self.max_context_tokens = max_context_tokens
        self.draft_by_argmax = draft_by_argmax
        self.warm_up = warm_up  # None: on a GPU only (see prepare)
        self.recent_stats: deque[DFlashStats] = deque(maxlen=num_recent_stats)
        self._draft: DFlashDraftModel | None = None
        self._generator: DFlashGenerator | None = None
        self._model_id: int | None = None
        self._is_active = False

    @classmethod
    def from_settings(cls, draft: Any) -> DFlashPath:
        """From the `[draft]` settings section (path, block_size, max_context_tokens)."""
        return cls(
            draft.path,
            draft_block_size=draft.block_size or None,
            max_context_tokens=draft.max_context_tokens,
        )

    def wants(self, prompt: Any, sampling: Any, *, num_running: int) -> bool:
        if num_running or self._is_active:
            return False
        if len(prompt.token_ids) + prompt.max_tokens > self.max_context_tokens:
            return False
        if getattr(sampling, "logit_bias", None):
            return False
        return all(getattr(sampling, k, v) == v for k, v in _NEUTRAL_SAMPLING.items())

    def prepare(self, model: Any) -> int:
        """Load the draft at the model's load, not at the first DFlash request, and (on a
        GPU, or with `warm_up`) run a short greedy and a short sampled generation through
        it: a process compiles what a cycle runs the first time it runs it (omlx's own
        CUDA kernels are not kept on disk by MLX 0.32: ~1.4 s each on an H100), which
        otherwise stalls the first requests served. Returns the tokens it generated."""
        generator = self._generator_for(model)
        if not (on_gpu() if self.warm_up is None else self.warm_up):
            return 0
        vocab = generator.target.vocab_size
        prompt = [i % vocab for i in range(1, WARM_PROMPT_TOKENS + 1)]
        # Two whole blocks and a short tail: the pipelined cycles and the last, shorter one.
        max_tokens = 2 * generator.drafter.draft_block_size + 2
        generated = 0
        for temperature in (0.0, WARM_TEMPERATURE):
            params = DFlashParams(
                max_tokens=max_tokens,
                temperature=temperature,
                draft_by_argmax=self.draft_by_argmax,
            )
            generated += sum(len(tokens) for tokens in generator.commits(prompt, params))
        return generated

    def open(
        self,
        model: Any,
        prompt_ids: list[int],
        sampling: Any,
        max_tokens: int,
        grammar: TokenGrammar | None = None,
    ) -> Iterator[list[int]]:
        """The committed tokens of each DFlash cycle (the first list is the prefill's);
        with a grammar (a constrained request), drafts are checked against it."""
        generator = self._generator_for(model)
        params = DFlashParams(
            max_tokens=max_tokens,
            temperature=float(sampling.temperature),
            draft_by_argmax=self.draft_by_argmax,
        )
        stats = DFlashStats(draft_block_size=generator.drafter.draft_block_size)
        stats.prompt_tokens = len(prompt_ids)
        self._is_active = True  # before the first step, so one admit pass opens only one
        return self._track(generator.commits(prompt_ids, params, stats, grammar), stats)

    def _track(self, commits: Iterator[list[int]], stats: DFlashStats) -> Iterator[list[int]]:
        try:
            for tokens in commits:
                stats.generated_tokens += len(tokens)
                yield tokens
        finally:
            # Runs when the engine finishes the request and drops (or closes) the stream.
            self._is_active = False
            self.recent_stats.append(stats)
            log.debug(
                "dflash request: τ=%.2f over %d cycles", stats.acceptance_length, stats.num_cycles
            )

    def _generator_for(self, model: Any) -> DFlashGenerator:
        # Loaded lazily on the engine thread: MLX arrays belong to the thread that made them.
        if self._generator is None or self._model_id != id(model):
            if self._draft is None:
                # "random": an untrained draft sized for the target (tests, benchmarks).
                self._draft = make_draft(model, str(self.draft_path))
                if uses_row_gemv(model):  # engine.row_gemv chose it for the target
                    use_row_gemv(self._draft)
                if kernel_takes_verifies(model):  # the kernel takes its verifies (CUDA)
                    use_kernel_attention(self._draft)
                log.info("loaded DFlash draft %s", self.draft_path)
            block = self.draft_block_size or serving_block_size(
                self._draft.config.block_size, gpu=on_gpu()
            )
            self._generator = DFlashGenerator.from_models(
                model, self._draft, draft_block_size=block
            )
            self._model_id = id(model)
        return self._generator

"""What the engine loop needs from MLX, as a protocol (pure Python).

EngineLoop runs admission, cancellation, limits, failure handling and shutdown in plain
Python against this seam; `omlx.engine.mlx_backend.MLXBackend` is the real one (model
load, mlx-lm's batch generator, samplers, memory figures) and tests drive the loop with a
scripted generator in milliseconds (tests/unit/engine/test_engine_loop.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from omlx.engine.api import SamplingParams, TokenLogprob


class StepStats(Protocol):
    prompt_tokens: int


class BatchGeneratorLike(Protocol):
    """The part of mlx-lm's BatchGenerator (and omlx's fused-join subclass) the loop uses."""

    prefill_step_size: int
    prefill_batch_size: int

    def insert_segments(self, segments: Sequence[Any], **kwargs: Any) -> list[int]: ...

    def next(self) -> tuple[list[Any], list[Any]]: ...

    def remove(self, uids: Sequence[int], return_prompt_caches: bool = False) -> Any: ...

    def extract_cache(self, uids: Sequence[int]) -> dict[int, Any]: ...

    def stats(self) -> AbstractContextManager[StepStats]: ...

    def close(self) -> None: ...


class EngineBackend(Protocol):
    """Everything model- and MLX-specific the loop calls, all on the engine thread."""

    def load(self, name: str, path: Any) -> Any:
        """The loaded model (omlx.engine.loading.LoadedModel or the like)."""
        ...

    def new_generator(self, loaded: Any) -> BatchGeneratorLike: ...

    def eos_stops(self, eos_token_ids: Sequence[int]) -> Any: ...

    def sampler(self, params: SamplingParams, vocab_size: int) -> Any: ...

    def logits_processors(
        self,
        params: SamplingParams,
        num_prompt_tokens: int,
        forced: Callable[..., Any] | None,
        *,
        grammar: Any = None,
    ) -> list[Any]:
        """The row's processors; `grammar` (a constraints.RowMatcher) masks what it forbids."""
        ...

    def token_logprob(
        self, tokenizer: Any, logprobs: Any, token: int, top_n: int
    ) -> TokenLogprob: ...

    def memory(self) -> dict[str, int]:
        """MLX active / peak / cache bytes."""
        ...

    def release(self) -> None:
        """Give cached device buffers back (after the model is dropped)."""
        ...

    def gil_switch_interval_s(self) -> float | None:
        """The GIL switch interval this device wants for the process, or None to leave it.

        A GPU's decode step is host-bound: the engine thread gives the GIL up in every
        eval and needs it back the moment the device is done, where CPython's default
        lets a busy event loop keep it for 5 ms. On a CPU the step is compute."""
        ...

"""The engine loop's MLX backend: model load, the batch generator, samplers, memory.

Everything here runs on the engine thread; MLX streams are thread-bound, so the
generator's stream is made there too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import mlx.core as mx

from omlx.engine.api import SamplingParams, TokenLogprob
from omlx.engine.constraints import RowMatcher
from omlx.engine.grammar_mask import GrammarProcessor
from omlx.engine.loading import LoadedModel, load_text_model
from omlx.engine.sampling import (
    forcing_processor,
    make_logits_processors,
    make_sampler,
    token_logprobs,
)
from omlx.mlx_lm_compat import StopSequences
from omlx.mlx_lm_compat.attention_kernel import (
    restore_kernel_attention,
    use_kernel_attention,
    warm_kernel_attention,
)
from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator
from omlx.mlx_lm_compat.cpu_prefill_attention import use_cpu_prefill_attention
from omlx.mlx_lm_compat.decode_attention import use_folded_decode_attention
from omlx.mlx_lm_compat.norm_rope_kernel import restore_norm_rope, use_norm_rope
from omlx.platform.device import on_cuda, on_gpu
from omlx.settings import EngineSettings

log = logging.getLogger(__name__)

# See EngineBackend.gil_switch_interval_s; CPython's default is 5 ms.
GPU_SWITCH_INTERVAL_S = 0.0005


class MLXBackend:
    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings

    def load(self, name: str, path: Path) -> LoadedModel:
        cuda = on_cuda()
        return load_text_model(
            name,
            path,
            fuse_projections=self.settings.fuses_projections(cuda=cuda),
            cpu_float32=self.settings.cpu_float32,
            row_gemv=self.settings.row_gemv_mode(cuda=cuda),
        )

    def new_generator(self, loaded: LoadedModel) -> FusedJoinBatchGenerator:
        if self.settings.fused_norm_rope == "on" and on_cuda():
            self._install_norm_rope(loaded.model)
        if self.settings.cpu_prefill_attention == "auto" and not on_gpu():
            use_cpu_prefill_attention(loaded.model)
        attention = self.settings.attention_mode(cuda=on_cuda())
        if attention == "folded":
            use_folded_decode_attention(loaded.model)
        elif attention in ("kernel", "decode_kernel") and not getattr(
            loaded.model, "_omlx_kernel_failed", False
        ):
            use_kernel_attention(loaded.model, batched_decode_only=attention == "decode_kernel")
            if not getattr(loaded.model, "_omlx_kernel_warm", False):
                # once a model (a generator is made anew after a failed step too). A
                # kernel that does not compile or run here (another CUDA, another card)
                # would fail every step: the model keeps MLX's attention instead, in
                # this generator and every later one.
                try:
                    warm_kernel_attention(loaded.model)
                except Exception:
                    log.warning(
                        "omlx's attention kernel failed on this GPU; using MLX's attention",
                        exc_info=True,
                    )
                    restore_kernel_attention(loaded.model)
                    loaded.model._omlx_kernel_failed = True
                loaded.model._omlx_kernel_warm = True
        return FusedJoinBatchGenerator(
            loaded.model,
            completion_batch_size=self.settings.max_running,
            prefill_batch_size=self.settings.prefill_rows(cuda=on_cuda()),
            prefill_step_size=self.settings.prefill_step_tokens,
            stream=mx.new_stream(mx.default_device()),
        )

    @staticmethod
    def _install_norm_rope(model: Any) -> None:
        """engine.fused_norm_rope: compiled at once with a two-row step (as the attention
        kernel is); one that fails here leaves the model's own norms for good."""
        if getattr(model, "_omlx_norm_rope_failed", False) or not use_norm_rope(model):
            return
        try:
            warm_kernel_attention(model)  # runs the model: compiles whatever is installed
        except Exception:
            log.warning("omlx's norm-rope kernel failed on this GPU; not using it", exc_info=True)
            restore_norm_rope(model)
            model._omlx_norm_rope_failed = True

    def eos_stops(self, eos_token_ids: Sequence[int]) -> StopSequences:
        return StopSequences([(t,) for t in sorted(eos_token_ids)])

    def sampler(self, params: SamplingParams, vocab_size: int) -> Any:
        return make_sampler(params, vocab_size)

    def logits_processors(
        self,
        params: SamplingParams,
        num_prompt_tokens: int,
        forced: Callable[..., Any] | None,
        *,
        grammar: RowMatcher | None = None,
    ) -> list[Any]:
        processors = make_logits_processors(params, num_prompt_tokens)
        if grammar is not None:  # first: the penalties then only see allowed tokens
            processors.insert(0, GrammarProcessor(grammar, num_prompt_tokens))
        if forced is not None:
            processors.append(forcing_processor(forced))
        return processors

    def token_logprob(self, tokenizer: Any, logprobs: Any, token: int, top_n: int) -> TokenLogprob:
        chosen, top = token_logprobs(logprobs, token, top_n)
        decode = tokenizer.decode
        return TokenLogprob(decode([token]), chosen, [(decode([t]), v) for t, v in top])

    def memory(self) -> dict[str, int]:
        return {
            "mlx_active_bytes": mx.get_active_memory(),
            "mlx_peak_bytes": mx.get_peak_memory(),
            "mlx_cache_bytes": mx.get_cache_memory(),
        }

    def release(self) -> None:
        mx.clear_cache()

    def gil_switch_interval_s(self) -> float | None:
        return GPU_SWITCH_INTERVAL_S if on_gpu() else None


__all__ = ["MLXBackend"]

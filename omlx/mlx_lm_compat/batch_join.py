"""A BatchGenerator whose prefilled sequences join the running batch with no forward of their own.

mlx-lm moves a sequence from prefill to decode by building a GenerationBatch for it, whose
constructor runs one forward pass over its last prompt token, and then concatenating that
batch into the running one. On memory-bound hardware a forward pass costs about the same
for one row as for thirty-two, so with requests arriving one by one each join costs the
running streams a whole extra decode step (a py-spy profile at 16 concurrent: 21% of the
engine thread in GenerationBatch.__init__).

Here the joining sequences enter the running batch *primed*: their pending input is the
last prompt token, which the batch's next ordinary decode step runs together with every
other row. That step's output for a primed row is the prompt token itself, not a
generated one, so it is not reported, counted toward max_tokens or matched against stop
sequences. The tokens computed are exactly mlx-lm's; only the grouping of rows changes.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.generate import BatchGenerator, GenerationBatch, PromptProcessingBatch
from mlx_lm.models.cache import BatchKVCache

from omlx.mlx_lm_compat.slot_cache import SlotKVCache, swap_remove_order, waits_for_in_place

# A sampler with this attribute set to True gives the same draws for logits shifted by a
# per-row constant (argmax, temperature, min-p, top-k), so the batch may hand it raw
# logits. A row's `Response.logprobs` are then unnormalised: read them through
# `row_logprobs`.
TAKES_LOGITS = "takes_logits"


def takes_logits(sampler: Any) -> Any:
    """Mark `sampler` as one that may be given raw logits (see TAKES_LOGITS)."""
    setattr(sampler, TAKES_LOGITS, True)
    return sampler


def row_logprobs(row: mx.array) -> mx.array:
    """A response row's log-probabilities, whether the batch normalised them or not."""
    return row - mx.logsumexp(row, axis=-1, keepdims=True)


class PrimedGenerationBatch(GenerationBatch):
    """A GenerationBatch some of whose rows still have their last prompt token pending."""

    max_rows = 0  # the generator's batch size, set on its running batch (slot capacity cap)

    def __init__(self, *args: Any, primed: bool = False, **kwargs: Any) -> None:
        self._defer_step = primed  # read by _step, which the base constructor calls
        self.sync_s = 0.0  # seconds the host waited for the device (see _decode_step)
        # The rows' batched logit bias: None = not built yet, False = some row's
        # processors need the per-row path.
        self._bias: tuple[mx.array, mx.array, mx.array] | bool | None = None
        # Each slot-cache layer's left padding, read once for the rows leaving this step.
        self._pads: list[list[int] | None] | None = None
        # Inside next(): the rows extract_cache handed out, filled by _extract_leaving.
        self._leaving: dict[int, list[Any]] | None = None
        super().__init__(*args, **kwargs)
        self._defer_step = False
        self._primed = [primed] * len(self.uids)
        if primed:
            # Stands in for the log-probabilities of the pending prompt token (never read).
            # Made here, on the engine thread: MLX arrays are bound to their thread's stream.
            self._next_logprobs = [mx.zeros((1,))] * len(self.uids)

    def _step(self) -> Any:
        self._pads = None
        if self._defer_step:
            return None
        if len(self.uids) != 1:
            return self._decode_step()
        with _lone_row_unmasked(self.prompt_cache):
            return self._decode_step()

    def _decode_step(self) -> tuple[list[int], list[mx.array]]:
        """mlx-lm's GenerationBatch._step, with the wait for the previous step timed.

        The graph of step n+1 is built and queued before the host waits for step n's
        tokens (MLX's async pipelining), so `sync_s` is the time the host had nothing to do
        but wait for the device: GPU-bound time, as against the host work around it.
        """
        self._current_tokens = self._next_tokens
        self._current_logprobs = self._next_logprobs
        inputs = self._current_tokens
        logits = self.model(inputs[:, None], cache=self.prompt_cache)[:, -1, :]
        token_context: list[mx.array] = []
        if any(self.logits_processors):
            logits = self._grammar_masked(logits, inputs)
        bias = self._batched_bias() if any(self.logits_processors) else None
        if bias is not None:
            rows_ids, col_ids, values = bias
            if len(rows_ids):
                logits = logits.at[rows_ids, col_ids].add(values.astype(logits.dtype))
        elif any(self.logits_processors):
            rows = []
            for e in range(len(self.uids)):
                row = logits[e : e + 1]
                processors = [p for p in self.logits_processors[e] or () if not _masks(p)]
                if processors:  # only rows with processors need their context
                    context = self._token_context[e].update_and_fetch(inputs[e : e + 1])
                    token_context.append(context)
                    for processor in processors:
                        row = processor(context, row)
                rows.append(row)
            logits = mx.concatenate(rows, axis=0)
        samplers = [
            self.fallback_sampler if s is None else s
            for s in (self.samplers or [None] * len(self.uids))
        ]
        # Normalising costs an exp per vocabulary entry and row (38 ms a step for 64 rows
        # of a 49k vocabulary on a 2-core CPU, an eighth of SmolLM2's step); argmax and
        # temperature sampling do not need it, and a row's log-probs, when a request
        # asks for them, are normalised from its logits then (`row_logprobs`).
        if all(getattr(s, TAKES_LOGITS, False) for s in samplers):
            logprobs = logits
        else:
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        if not samplers or all(s is samplers[0] for s in samplers):  # one batched call
            sampled = (samplers[0] if samplers else self.fallback_sampler)(logprobs)
        else:
            sampled = mx.concatenate(
                [s(logprobs[e : e + 1]) for e, s in enumerate(samplers)], axis=0
            )
        self._next_tokens = sampled
        self._next_logprobs = list(logprobs)
        mx.async_eval(self._next_tokens, self._next_logprobs, token_context)
        t0 = time.perf_counter()
        mx.eval(inputs, self._current_logprobs)
        self.sync_s += time.perf_counter() - t0
        tokens = inputs.tolist()
        for sti, ti in zip(self.tokens, tokens, strict=False):
            sti.append(ti)
        return tokens, self._current_logprobs

    def _grammar_masked(self, logits: mx.array, inputs: mx.array) -> mx.array:
        """The grammar masks of every constrained row (processors with `keep_row`), at once.

        Row by row, each processor would read its context off the device after the step's
        forward pass was queued, so each read waited for that pass and then for the masks
        before it (0.8 ms per constrained row on an H200). Here the forward pass is queued,
        the previous step's tokens are read once (they were queued before it, so only
        they are waited for), the masks are computed on the CPU while the pass runs, and
        all of them go to the device in one copy.
        """
        rows = [
            (e, p) for e, ps in enumerate(self.logits_processors) for p in ps or () if _masks(p)
        ]
        if not rows:
            return logits
        mx.async_eval(logits)
        last = inputs.tolist()
        vocab = logits.shape[-1]
        keep = []
        for e, p in rows:
            history, start = self.tokens[e], p.start
            # The row's context is its tokens in the cache plus this step's input.
            unseen = [*history[start:], last[e]] if start <= len(history) else []
            keep.append(p.keep_row(unseen, vocab))
        mask = rows[0][1].apply_mask
        if len(rows) == len(self.uids):
            return mask(logits, np.stack(keep))
        ids = mx.array([e for e, _ in rows])
        logits[ids] = mask(logits[ids], np.stack(keep))
        return logits

    def _batched_bias(self) -> tuple[mx.array, mx.array, mx.array] | None:
        """Every row's logits processors as one scatter-add, when all of them are
        context-free biases (a `batched_bias` attribute: token ids and values); else None.
        Grammar masks are applied before (`_grammar_masked`) and skipped here.

        Rows then need no token context either. Rebuilt only when rows join or leave.
        """
        if self._bias is None:
            rows: list[int] = []
            cols: list[int] = []
            vals: list[float] = []
            for row, processors in enumerate(self.logits_processors):
                for p in processors or ():
                    if _masks(p):
                        continue
                    bias = getattr(p, "batched_bias", None)
                    if bias is None:
                        self._bias = False
                        return None
                    rows += [row] * len(bias[0])
                    cols += bias[0]
                    vals += bias[1]
            self._bias = (mx.array(rows), mx.array(cols), mx.array(vals, dtype=mx.float32))
        return self._bias or None

    def extract_cache(self, idx: int) -> list[Any]:
        """Row `idx`'s cache, layer by layer. The rows that finish in one step all leave
        here; each layer's padding is read back from the device once for all of them (on
        a GPU each read waits on the stream: 64 rows leaving a 36-layer model read it
        2,304 times through mlx-lm's extract). Inside `next` the list comes back empty
        and is filled before `next` returns, from one gather a layer for all the rows
        leaving in the step (`_extract_leaving`)."""
        if self._pads is None:
            self._pads = [
                c.left_padding.tolist() if isinstance(c, SlotKVCache) else None
                for c in self.prompt_cache
            ]
        if self._leaving is not None:
            caches: list[Any] = []
            self._leaving[idx] = caches
            return caches
        return [
            c.extract(idx) if pads is None else c.extract_row(idx, pads[idx])
            for c, pads in zip(self.prompt_cache, self._pads, strict=True)
        ]

    def _extract_leaving(self) -> None:
        """Fill the lists `extract_cache` handed out in this step, before any row moves."""
        leaving, self._leaving = self._leaving, {}
        if not leaving:
            return
        rows = sorted(leaving)
        assert self._pads is not None  # read by the extract_cache calls
        for c, pads in zip(self.prompt_cache, self._pads, strict=True):
            layer = c.extract_rows(rows, pads) if pads else [c.extract(i) for i in rows]
            for idx, cache in zip(rows, layer, strict=True):
                leaving[idx].append(cache)

    def extend(self, batch: GenerationBatch) -> None:
        self._pads = None
        self._adopt_slot_caches()
        super().extend(batch)
        self._adopt_slot_caches()  # an empty batch takes the joining batch's caches
        self._primed.extend(getattr(batch, "_primed", [False] * len(batch.uids)))
        self._bias = None

    def filter(self, keep: list[int]) -> None:
        if self._leaving:
            self._extract_leaving()
        for c, pads in zip(self.prompt_cache, self._pads or (), strict=False):
            if pads is not None:
                c.known_padding = pads  # what extract_cache read this step (slot_cache)
        self._pads = None
        # Rows leave by swap-remove (slot_cache): the per-row lists follow the same order.
        if keep and self._adopt_slot_caches():
            keep = swap_remove_order(keep)
            # The step in flight reads the caches through views; until it is done, MLX
            # would copy whole arrays to move a row instead of moving it in place.
            if self._next_tokens is not None and waits_for_in_place():
                mx.eval(self._next_tokens)
        super().filter(keep)
        self._primed = [self._primed[i] for i in keep]
        self._bias = None

    def _adopt_slot_caches(self) -> bool:
        """Whether every layer's cache is (now) a slot cache; other kinds (rotating,
        recurrent) keep mlx-lm's own filter and row order."""
        caches = [SlotKVCache.adopt(c, self.max_rows) for c in self.prompt_cache]
        return bool(caches) and all(isinstance(c, SlotKVCache) for c in caches)

    def next(self) -> list[GenerationBatch.Response]:
        # rows extract_cache hands out empty, filled by the filter (GPU; see below)
        self._leaving = {} if gathers_leaving_rows() else None
        try:
            if not any(self._primed):
                return super().next()
            primed = self._primed
            self._primed = [False] * len(self.uids)
            # The base counts and stop-matches every row: hide the primed rows from it
            # by running the step here and handing it only what it would see for the
            # others.
            tokens, logprobs = self._step()
            return self._responses(tokens, logprobs, primed)
        finally:
            self._extract_leaving()  # a step in which no filter followed
            self._leaving = None

    def _responses(
        self, tokens: list[int], logprobs: list[Any], primed: list[bool]
    ) -> list[GenerationBatch.Response]:
        keep, responses = [], []
        for i, uid in enumerate(self.uids):
            if primed[i]:
                keep.append(i)  # its first generated token is now pending
                continue
            self._num_tokens[i] += 1
            reason = "length" if self._num_tokens[i] >= self.max_tokens[i] else None
            if self._matchers[i].advance(tokens[i]):
                reason = "stop"
            done = reason is not None
            if not done:
                keep.append(i)
            responses.append(
                self.Response(
                    uid=uid,
                    token=tokens[i],
                    logprobs=logprobs[i],
                    finish_reason=reason,
                    prompt_cache=self.extract_cache(i) if done else None,
                    all_tokens=self.tokens[i] if done else None,
                )
            )
        if len(keep) < len(self.uids):
            self.filter(keep)
        return responses


def gathers_leaving_rows() -> bool:
    """Whether the rows leaving in a step come from one gather a layer (SlotKVCache
    .extract_rows) rather than one copy each. On a GPU the step is bound by the host,
    and four graph nodes a row and layer cost ~1-2 ms a row; the gather costs the device
    one more copy of the rows, which is cheap there. On a CPU that copy is the expensive
    part (the 8B shape's 64 rows: 16.4 s against 11.6 s, leave_extract_cpu.jsonl), and
    each row is copied out once, at once (waits_for_in_place)."""
    return not waits_for_in_place()


def _masks(processor: Any) -> bool:
    return hasattr(processor, "keep_row")


@contextlib.contextmanager
def _lone_row_unmasked(caches: list[Any]) -> Iterator[None]:
    """Decode a batch of one row without an attention mask array.

    A lone row has no left padding (merge pads each row to the longest, so by zero here;
    filter shifts the padding down to the shortest row's), so its one query attends to
    every cached position and the causal mask is all true. Built as an array it still
    costs a mask per step and keeps attention off the maskless kernel: at batch 1 on a GPU
    (Qwen3-8B shape) decode ran ~20-30% slower than mlx-lm's plain generate loop
    (benchmarks/decode_paths.py, cache_decode_probe.py).
    """
    patched = [c for c in caches if isinstance(c, BatchKVCache)]
    for c in patched:
        c.make_mask = functools.partial(_mask_unless_one_query, c.make_mask)
    try:
        yield
    finally:
        for c in patched:
            del c.make_mask  # back to the class's method


def _mask_unless_one_query(
    make_mask: Any, n: int, return_array: bool = False, window_size: int | None = None
) -> Any:
    if n == 1 and not return_array and not window_size:  # a window may hide old positions
        return None
    return make_mask(n, return_array=return_array, window_size=window_size)


# How many positions a KV cache grows by on CUDA (mlx-lm grows by 256). MLX 0.32 sends a
# maskless one-row decode to cuDNN's attention once the cache holds 256 tokens, but only
# when the cache's capacity is a multiple of 256 (mlx-lm's step); cuDNN then builds a
# graph per (batch, capacity) on first use (0.6-0.8 s stalls seen over HTTP) and decodes
# slower than MLX's own vector kernel on the H200 (9.6 vs 7.0 ms a step, Qwen3-8B shape;
# benchmarks/decode_step_anatomy.py). Growing by 264 keeps the capacity of a cache that
# starts empty off multiples of 256 for 32 growths (8,448 positions), so decode stays on
# the vector kernel; one restored from the prefix cache starts at its length and may land
# on one now and then (cuDNN then decodes it, as before). Prefill, many tokens per query,
# still takes cuDNN.
CUDA_KV_STEP = 264


class PrimingPromptBatch(PromptProcessingBatch):
    """A prompt batch that hands its finished sequences over primed, not pre-stepped."""

    kv_step: int | None = None  # None: mlx-lm's own (CudaPrimingPromptBatch sets it)

    def prompt(self, tokens: list[list[int]]) -> None:
        self._set_kv_step()
        super().prompt(tokens)

    def _set_kv_step(self) -> None:
        if self.kv_step:
            for c in self.prompt_cache:
                if isinstance(c, BatchKVCache):
                    c.step = self.kv_step  # the caches then carry it into decode

    def generate(self, tokens: list[list[int]]) -> PrimedGenerationBatch:
        self._set_kv_step()  # one-token prompts skip prompt()
        if any(len(t) > 1 for t in tokens):
            self.prompt([t[:-1] for t in tokens])
        batch = PrimedGenerationBatch(
            self.model,
            self.uids,
            mx.array([t[-1] for t in tokens], dtype=mx.uint32),
            self.prompt_cache,
            self.tokens,
            self.samplers,
            self.fallback_sampler,
            self.logits_processors,
            self.stop_sequences,
            self.max_tokens,
            primed=True,
        )
        self.uids, self.prompt_cache, self.tokens = [], [], []
        self.samplers, self.logits_processors, self.max_tokens = [], [], []
        return batch


class CudaPrimingPromptBatch(PrimingPromptBatch):
    kv_step = CUDA_KV_STEP


class FusedJoinBatchGenerator(BatchGenerator):
    """BatchGenerator with primed joins (see the module docstring); same interface."""

    def __init__(self, model: Any, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        # split() and extend() keep the class of the batch they start from (and so its
        # kv_step: _copy makes the new batch through __new__, instance attributes are lost).
        prompt_batch = CudaPrimingPromptBatch if mx.cuda.is_available() else PrimingPromptBatch
        self._prompt_batch = prompt_batch.empty(
            self.model, self.sampler, prefill_step_size=self.prefill_step_size
        )
        self._generation_batch = PrimedGenerationBatch.empty(self.model, self.sampler)
        # The most rows the running batch ever holds: slot caches grow up to it.
        self._generation_batch.max_rows = self.completion_batch_size

    @property
    def sync_s(self) -> float:
        """Seconds decode steps waited for the device so far (the running batch is one
        object for the generator's life: joins extend it, removals filter it)."""
        return self._generation_batch.sync_s

    def kv_layout(self) -> dict[str, int]:
        """The running batch's KV arrays as the decode step sees them, read without
        touching the device (the step trace records it per step): positions filled and
        allocated, rows live and allocated."""
        caches = getattr(self._generation_batch, "prompt_cache", None) or []
        first = caches[0] if caches else None
        keys = getattr(first, "keys", None)
        if keys is None:
            return {}
        return {
            "kv_len": int(getattr(first, "_idx", 0)),
            "kv_positions": int(keys.shape[2]),
            "kv_rows": int(first.offset.shape[0]),
            "kv_slots": int(keys.shape[0]),
        }


__all__ = ["FusedJoinBatchGenerator"]

"""The DFlash loop: PREFILL → DRAFT → VERIFY → ACCEPT → ROLLBACK, repeated.

One `DFlashGenerator` serves one request at a time on the thread that loaded the
models (MLX streams are thread-bound). `generate` returns a `DFlashRun`, an iterator of
committed token ids, so callers can stream; its `stats` and `finish_reason` are filled
in as it runs.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import mlx.core as mx
import mlx.nn as nn

from omlx.draft.accept import accept_length
from omlx.draft.async_loop import async_cycles, runs_async
from omlx.draft.capture import TargetAdapter
from omlx.draft.device_cache import DeviceLength, DeviceOffsetKVCache
from omlx.draft.grammar import TokenGrammar, block_masks, suppressed
from omlx.draft.model import DFlashDraftModel
from omlx.draft.sampling import (
    probabilities,
    sample_with_temperature,
    speculative_accept,
    speculative_outcome,
)
from omlx.draft.stats import DFlashStats
from omlx.draft.stopping import StopCondition
from omlx.draft.vocab import RestrictedHead
from omlx.errors import InvalidRequest

PREFILL_STEP_TOKENS = 2048


class Drafter(Protocol):
    """Proposes the rest of a draft block; the DFlash draft model or a test oracle."""

    draft_block_size: int

    def start(self) -> None:
        """Forget the previous request's context."""

    def propose(self, committed: Sequence[int], context: mx.array) -> mx.array:
        """Logits [draft_block_size - 1, vocab] for the positions after `committed[-1]`.

        `context` holds the captured target states of the tokens committed to the
        target cache since the previous call (the whole prompt on the first call).
        """
        ...


class PipelinedDrafter(Drafter, Protocol):
    """A drafter that can draft from a verify block the host has not read yet."""

    @property
    def can_pipeline(self) -> bool: ...

    def propose_pipelined(
        self, known: int, chunk: mx.array, num_valid: mx.array, anchor: mx.array
    ) -> mx.array:
        """Logits [draft_block_size - 1, vocab] for the positions after `anchor`.

        `known`: the committed tokens the host knows, through the previous verify
        block's first token. `chunk`: that block's captured target states, of which the
        first `num_valid` rows (a device scalar) are committed; `anchor` [1]: the token
        the target chose after them (device). Every row of `chunk` joins the context;
        the caller drops the uncommitted ones with `drop_context` once it knows them.
        """
        ...

    def drop_context(self, num_rows: int) -> None:
        """Forget the last `num_rows` context rows."""


class DFlashDrafter:
    """The DFlash draft model driving proposals: block = [last token, MASK × (n - 1)]."""

    def __init__(
        self,
        model: DFlashDraftModel,
        target: TargetAdapter,
        draft_block_size: int | None = None,
    ) -> None:
        cfg = model.config
        cfg.check_target(
            hidden_size=target.hidden_size,
            vocab_size=target.vocab_size,
            num_layers=target.num_layers,
        )
        self.model = model
        self.target = target
        self.draft_block_size = draft_block_size or cfg.block_size
        if self.draft_block_size < 2:
            raise InvalidRequest("the DFlash draft block size must be at least 2")
        self.mask_token_id = cfg.mask_token_id
        self._cache: list[Any] = []
        self._length = DeviceLength()  # the caches' length after start_device
        self._head: Any = target.lm_head
        if model.vocab is not None:
            self._head = RestrictedHead(
                target.head_module, model.vocab.token_ids, target.vocab_size
            )

    def start(self) -> None:
        self._cache = self.model.make_cache()

    def propose(self, committed: Sequence[int], context: mx.array) -> mx.array:
        block = [committed[-1]] + [self.mask_token_id] * (self.draft_block_size - 1)
        embeddings = self.target.embed(mx.array(block)[None])
        hidden = self.model(embeddings.astype(context.dtype), context, self._cache)
        return self._head(hidden[:, 1:])[0]

    @property
    def can_pipeline(self) -> bool:
        return self.model.takes_device_positions

    def propose_pipelined(
        self, known: int, chunk: mx.array, num_valid: mx.array, anchor: mx.array
    ) -> mx.array:
        masks = mx.full((self.draft_block_size - 1,), self.mask_token_id, dtype=mx.uint32)
        block = mx.concatenate([anchor.astype(mx.uint32), masks])
        embeddings = self.target.embed(block[None])
        hidden = self.model(embeddings.astype(chunk.dtype), chunk, self._cache, num_valid)
        return self._head(hidden[:, 1:])[0]

    def drop_context(self, num_rows: int) -> None:
        if num_rows > 0:
            for layer_cache in self._cache:
                layer_cache.trim(num_rows)

    def start_device(self) -> None:
        """Context caches with a device-side length (async_loop.py): proposals then go
        through propose_committing, which commits their valid rows, and nothing is
        dropped."""
        self._length = DeviceLength()
        self._cache = [DeviceOffsetKVCache(self._length) for _ in self.model.layers]

    def propose_committing(self, chunk: mx.array, num_valid: mx.array, anchor: mx.array):
        """propose_pipelined on device-length caches, keeping `num_valid` rows of `chunk`."""
        logits = self.propose_pipelined(0, chunk, num_valid, anchor)
        self._length.commit(num_valid, chunk.shape[1])
        return logits

    def settle(self, bound: int) -> None:
        self._length.settle(bound)


@dataclass(frozen=True, slots=True)
class DFlashParams:
    """One request's sampling and stopping parameters."""

    max_tokens: int = 256
    temperature: float = 0.0
    draft_by_argmax: bool = False  # temperature > 0: draft greedily, target samples
    eos_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    suppress_token_ids: tuple[int, ...] = ()

    @property
    def is_greedy(self) -> bool:
        return self.temperature < 1e-5


class DFlashRun:
    """Iterator over one request's emitted token ids; stats fill in as it runs."""

    def __init__(self, generator: DFlashGenerator, prompt: list[int], params: DFlashParams):
        self.stats = DFlashStats(draft_block_size=generator.drafter.draft_block_size)
        self.stats.prompt_tokens = len(prompt)
        self.stop = StopCondition(
            max_tokens=params.max_tokens,
            eos_token_ids=params.eos_token_ids,
            stop=params.stop,
            decode=generator.decode,
        )
        self._tokens = self._emit(generator.commits(prompt, params, self.stats))

    @property
    def finish_reason(self) -> str | None:
        return self.stop.finish_reason

    @property
    def tokens(self) -> list[int]:
        return self.stop.tokens

    def __iter__(self) -> Iterator[int]:
        return self._tokens

    def __next__(self) -> int:
        return next(self._tokens)

    def _emit(self, commits: Iterator[list[int]]) -> Iterator[int]:
        start = time.perf_counter()
        for tokens in commits:
            for token in tokens:
                if self.stop.accept(token):
                    self.stats.generated_tokens = len(self.stop.tokens)
                    yield token
                if self.stop.done:
                    break
            if self.stop.done:
                break
        commits.close()
        self.stats.total_s = time.perf_counter() - start

    def run(self) -> list[int]:
        """Consume the whole run; the emitted tokens."""
        for _ in self._tokens:
            pass
        return self.tokens


@dataclass(frozen=True, slots=True)
class QueuedVerify:
    """A verify the device may still be running: its inputs and outcome, all arrays."""

    draft: mx.array  # [n - 1] drafted ids
    hidden: mx.array  # [1, n, C] captured target states of the block
    tapes: list[Any]
    num_valid: mx.array  # scalar: the block's committed rows (anchor + kept drafts)
    bonus: mx.array  # [1]: the token emitted after them


class DFlashGenerator:
    """Speculative decoding of a target with a DFlash drafter, one request at a time."""

    def __init__(
        self,
        target: TargetAdapter,
        drafter: Drafter,
        decode: Any = None,
        *,
        sync_phases: bool = False,
        pipelined: bool = True,
        queue_ahead: bool = False,
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.decode = decode  # token ids -> text, for stop strings
        # True waits for the device after each phase, so the stats' time split is the
        # device's; False (serving) queues the verify behind the draft without a sync.
        self.sync_phases = sync_phases
        # Greedy cycles draft from a verify not yet read back where they can
        # (_pipelined_cycles); False keeps every cycle sequential (benchmarks compare).
        self.pipelined = pipelined
        # Pipelined cycles on device-length caches, queued before the last is read
        # (async_loop.py), where the target allows. Off by default: on an H100 it was
        # slower than reading each verify first (async_loop.py says by how much).
        self.queue_ahead = queue_ahead

    @classmethod
    def from_models(
        cls,
        target_model: nn.Module,
        draft_model: DFlashDraftModel,
        *,
        draft_block_size: int | None = None,
        decode: Any = None,
        sync_phases: bool = False,
        pipelined: bool = True,
        queue_ahead: bool = False,
    ) -> DFlashGenerator:
        target = TargetAdapter(target_model, draft_model.config.target_layer_ids)
        drafter = DFlashDrafter(draft_model, target, draft_block_size)
        return cls(
            target,
            drafter,
            decode,
            sync_phases=sync_phases,
            pipelined=pipelined,
            queue_ahead=queue_ahead,
        )

    def generate(self, prompt_ids: Sequence[int], params: DFlashParams) -> DFlashRun:
        if not prompt_ids:
            raise InvalidRequest("DFlash needs a non-empty prompt")
        if params.max_tokens < 1:
            raise InvalidRequest("max_tokens must be at least 1", param="max_tokens")
        return DFlashRun(self, list(prompt_ids), params)

    def _suppress_mask(self, params: DFlashParams) -> mx.array | None:
        if not params.suppress_token_ids:
            return None
        mask = mx.zeros((self.target.vocab_size,), dtype=mx.bool_)
        mask[mx.array(params.suppress_token_ids)] = True
        return mask

    def _prefill(self, prompt: list[int], cache: list[Any]) -> tuple[mx.array, mx.array]:
        """PREFILL in chunks: the last position's logits and every position's context.

        All but the last token run through the decoder stack alone, so no chunk computes
        [chunk, vocab] logits; the last token runs through the whole model.
        """
        hiddens = []
        body = prompt[:-1]
        for start in range(0, len(body), PREFILL_STEP_TOKENS):
            chunk = mx.array(body[start : start + PREFILL_STEP_TOKENS])[None]
            _, hidden, _ = self.target.forward(chunk, cache, with_logits=False)
            hiddens.append(hidden)
            mx.eval(hidden, [c.state for c in cache])
        logits, hidden, _ = self.target.forward(mx.array(prompt[-1:])[None], cache)
        hiddens.append(hidden)
        assert logits is not None
        return logits[0, -1], mx.concatenate(hiddens, axis=1)

    def commits(
        self,
        prompt: Sequence[int],
        params: DFlashParams,
        stats: DFlashStats | None = None,
        grammar: TokenGrammar | None = None,
    ) -> Iterator[list[int]]:
        """The tokens each step commits: [prefill's token], then every cycle's accepted
        drafts plus its bonus token; never more than `params.max_tokens` in all. With a
        grammar, every committed token is one it allows (omlx.draft.grammar).

        EOS and stop strings are the caller's to check (DFlashRun does; so does the engine).
        """
        stats = stats or DFlashStats(draft_block_size=self.drafter.draft_block_size)
        start = time.perf_counter()
        mask = self._suppress_mask(params)
        cache = self.target.make_cache()
        self.drafter.start()
        last_logits, context = self._prefill(list(prompt), cache)
        first_mask = mask
        if grammar is not None:
            first_mask = suppressed(grammar.keep(self.target.vocab_size), mask)
        token = int(sample_with_temperature(last_logits, params.temperature, first_mask).item())
        if grammar is not None:
            grammar.consume([token])
        stats.prefill_s = time.perf_counter() - start
        committed = [*prompt, token]
        num_emitted = 1
        yield [token]
        if self.queue_ahead and self._pipelines(grammar) and runs_async(self, cache):
            yield from async_cycles(
                self, committed, context, cache, params, mask, stats, num_emitted, start
            )
            return
        if self._pipelines(grammar, params.max_tokens - num_emitted):
            committed, context, num_emitted = yield from self._pipelined_cycles(
                committed, context, cache, params, mask, stats, num_emitted, start
            )
        while num_emitted < params.max_tokens:
            # Never verify more drafts than tokens the request may still emit.
            max_drafts = min(self.drafter.draft_block_size - 1, params.max_tokens - num_emitted - 1)
            new_tokens, context = self._cycle(
                committed, context, cache, params, mask, stats, max_drafts, grammar
            )
            stats.acceptance_lengths.append(len(new_tokens))
            committed += new_tokens
            num_emitted += len(new_tokens)
            stats.total_s = time.perf_counter() - start
            yield new_tokens

    def _pipelines(self, grammar: TokenGrammar | None, room: int | None = None) -> bool:
        """No grammar, a drafter that can draft from an unread verify, and (when `room`
        is given) room for at least one whole block; `sync_phases` keeps the phases
        apart."""
        return (
            self.pipelined
            and grammar is None
            and not self.sync_phases
            and getattr(self.drafter, "can_pipeline", False)
            and (room is None or room >= self.drafter.draft_block_size)
        )

    def _pipelined_cycles(
        self,
        committed: list[int],
        context: mx.array,
        cache: list[Any],
        params: DFlashParams,
        mask: mx.array | None,
        stats: DFlashStats,
        num_emitted: int,
        start: float,
    ) -> Generator[list[int], None, tuple[list[int], mx.array, int]]:
        """Cycles whose next block is drafted while the target verifies this one.

        The verify's outcome is also computed on the device (how many drafts are kept,
        and the token after them: by argmax, or by speculative sampling), so the next
        draft's graph is built and queued before the host reads the verify back: the
        device verifies while the host builds the next draft, and drafts while the host
        rolls back and builds the next verify. In `_cycle` the device idles while the
        host builds each draft and the host idles while the device verifies; on a small
        target, where a step is mostly the host's graph building and launches, that is
        most of a cycle.
        Greedy, the same tokens as `_cycle` (same argmax, same acceptance rule); sampled,
        the same rule (omlx.draft.sampling.speculative_outcome) drawing the same random
        numbers in the same order, so one seed gives `_cycle`'s tokens too, except in the
        tail after a dropped draft that sampled.

        Runs while a whole block still fits in max_tokens (a draft is built before the
        host knows how many tokens the previous cycle commits). Returns the committed
        tokens, the context rows not yet given to the drafter, and the tokens emitted,
        for `_cycle` to finish the request.
        """
        drafter = cast(PipelinedDrafter, self.drafter)  # _pipelines checked can_pipeline
        size = drafter.draft_block_size
        t0 = time.perf_counter()
        draft = self.draft_tokens(drafter.propose(committed, context), params, mask)
        t1 = time.perf_counter()
        stats.draft_s += t1 - t0
        known = len(committed)
        pending = self.queue_verify(committed[-1], draft, cache, params, mask)
        stats.verify_s += time.perf_counter() - t1
        while True:
            t0 = time.perf_counter()
            logits = drafter.propose_pipelined(
                known, pending.hidden, pending.num_valid, pending.bonus
            )
            next_draft = self.draft_tokens(logits, params, mask)
            mx.async_eval(*(a for a in next_draft if a is not None))
            t1 = time.perf_counter()
            stats.draft_s += t1 - t0
            draft_ids = pending.draft.tolist()
            num_kept = pending.num_valid.item() - 1
            new_tokens = [*draft_ids[:num_kept], pending.bonus.item()]
            t2 = time.perf_counter()
            stats.verify_s += t2 - t1
            self.target.rollback(cache, pending.tapes, num_kept + 1, size)
            drafter.drop_context(size - 1 - num_kept)  # the rejected rows of the chunk
            stats.rollback_s += time.perf_counter() - t2
            stats.acceptance_lengths.append(len(new_tokens))
            committed += new_tokens
            num_emitted += len(new_tokens)
            stats.total_s = time.perf_counter() - start
            if params.max_tokens - num_emitted < size:
                # The queued draft is dropped; `_cycle` gives the drafter the kept rows.
                drafter.drop_context(num_kept + 1)
                yield new_tokens
                return committed, pending.hidden[:, : num_kept + 1], num_emitted
            t3 = time.perf_counter()
            known = len(committed)
            pending = self.queue_verify(committed[-1], next_draft, cache, params, mask)
            stats.verify_s += time.perf_counter() - t3
            yield new_tokens

    def queue_verify(
        self,
        anchor: int | mx.array,
        drafted: tuple[mx.array, mx.array | None],
        cache: list[Any],
        params: DFlashParams,
        mask: mx.array | None,
    ) -> QueuedVerify:
        """The target's forward over [anchor, drafts], queued, with its outcome."""
        draft, draft_probs = drafted
        if isinstance(anchor, mx.array):  # the previous verify's bonus, on the device
            first = anchor.astype(mx.uint32).reshape(1)
        else:
            first = mx.array([anchor], dtype=mx.uint32)
        block = mx.concatenate([first, draft])
        logits, hidden, tapes = self.target.forward(block[None], cache, record_tape=True)
        assert logits is not None
        if params.is_greedy:
            chosen = sample_with_temperature(logits[0], 0.0, mask)
            hits = (draft == chosen[:-1]).astype(mx.int32)
            num_kept = mx.cumprod(hits, axis=0).sum()
            bonus = mx.take(chosen, num_kept.reshape(1))
        else:
            target_probs = probabilities(logits[0], params.temperature, mask)
            num_kept, bonus = speculative_outcome(draft, target_probs, draft_probs)
        num_valid = num_kept + 1  # the anchor and the kept drafts
        lengths = {id(c.length): c.length for c in cache if isinstance(c, DeviceOffsetKVCache)}
        for length in lengths.values():  # device-length caches roll back with no host read
            length.commit(num_valid, block.shape[0])
        mx.async_eval(draft, hidden, num_valid, bonus)
        return QueuedVerify(draft, hidden, tapes, num_valid, bonus)

    def _cycle(
        self,
        committed: list[int],
        context: mx.array,
        cache: list[Any],
        params: DFlashParams,
        mask: mx.array | None,
        stats: DFlashStats,
        max_drafts: int,
        grammar: TokenGrammar | None = None,
    ) -> tuple[list[int], mx.array]:
        """One DRAFT → VERIFY → ACCEPT → ROLLBACK cycle: the committed tokens.

        Unless `sync_phases`, the host never waits between draft and verify: the drafted
        ids stay on the device and feed the verify block, the draft runs while the host
        builds the verify graph, and one wait per cycle fetches both id lists. On a small
        target the host's graph building is a large part of a step, so the overlap counts.
        A grammar needs the drafted ids on the host before the verify (its masks follow
        them), so it costs one more wait per cycle.
        """
        t0 = time.perf_counter()
        block = mx.array(committed[-1:], dtype=mx.uint32)
        draft = draft_probs = None
        verify_mask = mask
        if max_drafts > 0:
            draft_logits = self.drafter.propose(committed, context)[:max_drafts]
            draft, draft_probs = self.draft_tokens(draft_logits, params, mask)
            if grammar is not None:
                n, keep = block_masks(grammar, draft.tolist(), self.target.vocab_size)
                draft = draft[:n]
                draft_probs = draft_probs[:n] if draft_probs is not None else None
                verify_mask = suppressed(keep, mask)
            block = mx.concatenate([block, draft])
            if self.sync_phases:
                mx.eval(draft)
            else:
                mx.async_eval(draft)
        elif grammar is not None:
            verify_mask = suppressed(grammar.keep(self.target.vocab_size)[None], mask)
        t1 = time.perf_counter()
        stats.draft_s += t1 - t0

        logits, hidden, tapes = self.target.forward(block[None], cache, record_tape=True)
        assert logits is not None
        if params.is_greedy:
            chosen = sample_with_temperature(logits[0], 0.0, verify_mask)
            mx.async_eval(chosen, hidden)
            draft_ids = draft.tolist() if draft is not None else []
            target_ids = chosen.tolist()
            num_kept = accept_length(draft_ids, target_ids)
            bonus = target_ids[num_kept]
        else:
            target_probs = probabilities(logits[0], params.temperature, verify_mask)
            mx.async_eval(target_probs, hidden)
            draft_ids = draft.tolist() if draft is not None else []
            num_kept, bonus = speculative_accept(draft_ids, target_probs, draft_probs)
        t2 = time.perf_counter()
        stats.verify_s += t2 - t1

        self.target.rollback(cache, tapes, num_kept + 1, len(draft_ids) + 1)
        context = hidden[:, : num_kept + 1]
        if self.sync_phases:
            mx.eval(context)
        stats.rollback_s += time.perf_counter() - t2
        new_tokens = [*draft_ids[:num_kept], bonus]
        if grammar is not None:
            grammar.consume(new_tokens)
        return new_tokens, context

    @staticmethod
    def draft_tokens(
        draft_logits: mx.array, params: DFlashParams, mask: mx.array | None
    ) -> tuple[mx.array, mx.array | None]:
        """The drafted ids (uint32) and, when sampled, the distributions behind them."""
        if params.is_greedy or params.draft_by_argmax:
            return sample_with_temperature(draft_logits, 0.0, mask), None
        draft_probs = probabilities(draft_logits, params.temperature, mask)
        draft = mx.random.categorical(mx.log(draft_probs)).astype(mx.uint32)
        return draft, draft_probs

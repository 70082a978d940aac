"""The engine thread: loads one model and owns its batch generator.

One loop, in named phases: drain commands → admit → step → publish → store. The loop
itself is plain Python; every MLX call goes through its backend (`EngineBackend`,
`MLXBackend` unless a test passes another), so the policy here is tested without MLX.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omlx.engine.api import (
    FinishReason,
    Progress,
    RequestId,
    Started,
    Token,
    TokenLogprob,
)
from omlx.engine.backend import EngineBackend
from omlx.engine.collector import collect_unloaded, freeze_loaded
from omlx.engine.commands import (
    AltPath,
    Call,
    Cancel,
    Command,
    Shutdown,
    Submission,
    Submit,
)
from omlx.engine.live import Finished, Live, done_event, failed_event
from omlx.engine.metrics import EngineMetrics
from omlx.engine.outbox import Outbox
from omlx.engine.prefix import NoPrefixHooks, PrefixHooks
from omlx.engine.scheduling import PrefillPacer, UidMap
from omlx.engine.step_trace import StepTrace
from omlx.engine.store_queue import StoreQueue
from omlx.engine.text.detokenize import TextStream
from omlx.engine.text.thinking import make_think_budget
from omlx.errors import OmlxError, Overloaded
from omlx.platform.blas_threads import ThreadGovernor, process_governor
from omlx.settings import EngineSettings

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5  # how often an idle engine wakes to refresh memory stats
MEMORY_EVERY_S = 1.0
# The pacer plans for this fraction of engine.prefill_share, a margin under the promise
# (streams keep at least 1 - prefill_share of their speed): step times are noisy on shared
# CPUs, and MLX's async pipelining blurs which step a cost lands in. SmolLM2 on 2 AVX2
# cores at 0.3: 83% kept, read against a control run at the same tokens (engine_fairness).
PLANNED_SHARE_FRACTION = 0.8
PROGRESS_EVERY_S = 0.25  # at most this often a Progress event per prefilling request

PrefixFactory = Callable[[Any, Path], PrefixHooks]


@dataclass(slots=True)
class EngineLoop:
    name: str
    path: Path
    settings: EngineSettings
    metrics: EngineMetrics
    prefix_factory: PrefixFactory | None = None
    alt_path: AltPath | None = None
    commands: queue.SimpleQueue[Command] = field(default_factory=queue.SimpleQueue)
    backend: EngineBackend | None = None  # MLXBackend(settings) when not given
    loaded: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    _lm: Any = None
    _gen: Any = None
    _prefix: PrefixHooks = field(default_factory=NoPrefixHooks)
    _eos_stops: Any = None
    _waiting: deque[Submission] = field(default_factory=deque)
    _live: dict[RequestId, Live] = field(default_factory=dict)
    _uids: UidMap = field(default_factory=UidMap)
    _outbox: Outbox = field(default_factory=Outbox)
    _stores: StoreQueue = field(default_factory=StoreQueue)
    _pacer: PrefillPacer | None = None
    _deadline: float | None = None  # set by Shutdown: cancel what still runs after it
    _memory_at: float = 0.0
    _blas: ThreadGovernor | None = None
    _trace: StepTrace | None = None  # engine.step_trace: per-step timings (benchmarks)
    steps: int = 0  # engine steps taken (tests count decode steps during a prefill)
    decode_steps_during_prefill: int = 0

    # -- thread body -------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.setup()
        except BaseException as e:  # reported to whoever waits for the load
            self.loaded.set_exception(e)
            return
        self.loaded.set_result(self._lm)  # type: ignore[arg-type]
        try:
            while not self.should_exit():
                self.tick()
        except Exception:
            log.exception("engine thread of model %s crashed", self.name)
            raise
        finally:  # never leave a consumer waiting on a dead thread
            self._fail_all(OmlxError(f"the engine of model {self.name!r} stopped"))
            self._teardown()

    def loaded_model(self) -> Any:
        """The loaded model (call on the engine thread; None before setup, after teardown)."""
        return self._lm

    def tick(self) -> None:
        """One pass of the loop (tests call it directly, after `setup`)."""
        if self._trace is not None:
            self._traced_tick(self._trace)
            return
        self._drain_commands()
        self._admit()
        self._step()
        self._outbox.flush()
        self._store_finished()
        self._refresh_memory()
        self._tune_blas()

    def _traced_tick(self, trace: StepTrace) -> None:
        """`tick` with its phases timed into the step trace (engine.step_trace)."""
        clock = time.perf_counter
        self._drain_commands()  # an idle engine waits here: the timed row starts after it
        t1, cpu1 = clock(), time.thread_time()
        self._admit()
        t2 = clock()
        trace.batch = None
        self._step()
        t3 = clock()
        self._outbox.flush()
        t4 = clock()
        self._store_finished()
        self._refresh_memory()
        self._tune_blas()
        t5 = clock()
        if trace.batch is None:  # no batch step this tick: a moment to write the rows
            if not self._live and not self._waiting:
                trace.idle()
            return
        trace.step(
            {
                **trace.batch,
                "running": len(self._live),
                "waiting": len(self._waiting),
                "tick_s": t5 - t1,
                "admit_s": t2 - t1,
                "alt_s": t3 - t2 - trace.batch["step_s"] - trace.batch["publish_s"],
                "flush_s": t4 - t3,
                "store_s": t5 - t4,
                "cpu_s": time.thread_time() - cpu1,
            }
        )

    def _prepare_alt_path(self) -> None:
        prepare = getattr(self.alt_path, "prepare", None)
        if prepare is None:
            return
        try:
            prepare(self._lm.model)
        except Exception:  # the model still serves; the path's first request retries
            log.warning("preparing the %s path of model %s failed", self.alt_path.name,
                        self.name, exc_info=True)  # fmt: skip

    def _fail_all(self, error: Exception) -> None:
        while self._waiting:
            sub = self._waiting.popleft()
            self._outbox.put(sub.sink, failed_event(sub, error))
        for live in list(self._live.values()):
            self._fail(live, error)
        self._outbox.flush()

    def setup(self) -> None:
        """Load the model and build the generator (what `run` does before looping)."""
        if self.backend is None:
            from omlx.engine.mlx_backend import MLXBackend  # MLX: on this thread only

            self.backend = MLXBackend(self.settings)
        self._lm = self.backend.load(self.name, self.path)
        interval = self.backend.gil_switch_interval_s()
        if interval is not None and sys.getswitchinterval() > interval:
            sys.setswitchinterval(interval)  # process-wide; never raised again
        self._eos_stops = self.backend.eos_stops(self._lm.eos_token_ids)
        share = self.settings.prefill_share
        share = 1.0 if share >= 1.0 else share * PLANNED_SHARE_FRACTION  # 1 = prefill first
        self._pacer = PrefillPacer(share, self.settings.prefill_step_tokens)
        self._gen = self.backend.new_generator(self._lm)
        self._prepare_alt_path()
        if self.prefix_factory is not None:
            self._prefix = self.prefix_factory(self._lm.model, self.path)
        self.metrics.memory["model_bytes"] = self._lm.weight_bytes
        self._blas = process_governor()
        if self.settings.freeze_gc:
            freeze_loaded()
        if self.settings.step_trace:  # after the load's collection: not a serving pause
            self._trace = StepTrace(self.settings.step_trace, self.name)
            self._outbox.trace = self._trace

    def should_exit(self) -> bool:
        if self._deadline is None:
            return False
        if self._live and time.monotonic() >= self._deadline:
            for rid in list(self._live):
                self._cancel(rid)
            self._outbox.flush()
        return not self._live

    def _teardown(self) -> None:
        self._stores.drain(self._prefix)  # deferred stores: kept for the next start
        if self._trace is not None:
            self._trace.close()
        if self._gen is not None:
            self._gen.close()
        loaded, self._gen, self._lm = self._lm is not None, None, None
        if self.backend is not None:
            self.backend.release()
        if loaded and self.settings.freeze_gc:
            collect_unloaded()

    # -- phase 1: drain commands ---------------------------------------------------------

    def _drain_commands(self) -> None:
        idle = not self._live and not self._waiting and self._deadline is None
        idle = idle and not self._stores.pending  # deferred stores run one per tick meanwhile
        try:
            cmd = self.commands.get(timeout=IDLE_WAIT_S) if idle else self.commands.get_nowait()
        except queue.Empty:
            return
        while True:
            self._handle(cmd)
            try:
                cmd = self.commands.get_nowait()
            except queue.Empty:
                return

    def _handle(self, cmd: Command) -> None:
        if isinstance(cmd, Submit):
            if self._deadline is not None:
                self._outbox.put(
                    cmd.submission.sink,
                    failed_event(
                        cmd.submission, Overloaded(f"model {self.name!r} is shutting down")
                    ),
                )
            else:
                self._waiting.append(cmd.submission)
        elif isinstance(cmd, Cancel):
            self._cancel(cmd.request_id)
        elif isinstance(cmd, Shutdown):
            self._deadline = time.monotonic() + cmd.grace_s
            while self._waiting:
                sub = self._waiting.popleft()
                self._outbox.put(sub.sink, done_event(sub, FinishReason.CANCELLED, 0, 0))
        elif isinstance(cmd, Call):
            try:
                cmd.future.set_result(cmd.fn())
            except Exception as e:
                cmd.future.set_exception(e)

    def _cancel(self, request_id: RequestId) -> None:
        for sub in self._waiting:
            if sub.request_id == request_id:
                self._waiting.remove(sub)
                self._outbox.put(sub.sink, done_event(sub, FinishReason.CANCELLED, 0, 0))
                return
        live = self._live.pop(request_id, None)
        if live is None:
            return
        uid = self._uids.pop(request_id)
        if uid is not None:
            # Keep what was computed: agents cancel and retry the same long prompt, and
            # the retry should prefill only what this request had not reached.
            got = self._gen.remove([uid], return_prompt_caches=True)
            cache, tokens = (got or {}).get(uid) or (None, None)
            if cache is not None and tokens:
                self._stores.add(Finished(live, FinishReason.CANCELLED, list(tokens), cache))
        close = getattr(live.alt, "close", None)
        if close is not None:  # a generator: let it release what it holds
            close()
        self.metrics.finished(request_id)
        self._outbox.put(
            live.sub.sink,
            done_event(
                live.sub,
                FinishReason.CANCELLED,
                live.num_generated,
                live.cached_tokens,
                live.served_by,
            ),
        )

    # -- phase 2: admit ----------------------------------------------------------------

    def _admit(self) -> None:
        # What a request cancelled in this tick computed is stored before anything is
        # admitted: a client's retry often arrives together with its cancel.
        self._store_finished(idle_store=False)
        while self._waiting and len(self._live) < self.settings.max_running:
            sub = self._waiting.popleft()
            try:
                live = self._insert(sub)
            except Exception as e:
                log.exception("admitting %s failed", sub.request_id)
                self._outbox.put(sub.sink, failed_event(sub, e))
                continue
            self._live[sub.request_id] = live
            if self._trace is not None:
                self._trace.admitted(sub, time.monotonic())
            n = len(sub.prompt.token_ids)
            self.metrics.started(sub.request_id, n, live.cached_tokens, live.served_by)
            started = Started(sub.request_id, n, live.cached_tokens, sub.prompt.max_tokens)
            self._outbox.put(sub.sink, started)
        self.metrics.set_queued(len(self._waiting))

    def _insert(self, sub: Submission) -> Live:
        assert self._lm is not None
        ids, params = sub.prompt.token_ids, sub.sampling
        text = TextStream(self._lm.tokenizer.detokenizer, sub.stop)
        alt = self.alt_path
        grammar = sub.grammar.matcher() if sub.grammar is not None else None
        if alt is not None and alt.wants(sub.prompt, params, num_running=len(self._uids)):
            stream = alt.open(self._lm.model, ids, params, sub.prompt.max_tokens, grammar=grammar)
            return Live(sub, text, 0, alt=stream, served_by=alt.name, prefilling=False)
        caches, num_cached = self._prefix.fetch(ids)
        if caches is None or not 0 < num_cached < len(ids):  # one token must be left to prefill
            caches, num_cached = None, 0
        segments, snapshot_at = self._segments(ids, num_cached)
        vocab = self._lm.spec.vocab_size or len(self._lm.tokenizer)
        think = make_think_budget(
            self._lm.tokenizer, sub.thinking_budget_tokens, sub.prompt.prompt_ends_in_think
        )
        backend = self.backend
        assert backend is not None
        processors = backend.logits_processors(
            params,
            len(ids),
            think.next_forced if think is not None else None,
            grammar=grammar,
        )
        [uid] = self._gen.insert_segments(
            [segments],
            max_tokens=[sub.prompt.max_tokens],
            caches=[caches],
            all_tokens=[list(ids[:num_cached])],
            samplers=[backend.sampler(params, vocab)],
            logits_processors=[processors],
            stop_sequences=[self._eos_stops],
        )
        self._uids.add(uid, sub.request_id)
        return Live(sub, text, num_cached, uid=uid, snapshot_at=snapshot_at, think=think)

    def _segments(self, ids: list[int], num_cached: int) -> tuple[list[list[int]], int | None]:
        """Split the prompt where the prefix cache wants a recurrent-state snapshot."""
        snapshot_point = getattr(self._prefix, "snapshot_point", None)
        point = snapshot_point(len(ids), num_cached) if snapshot_point else None
        if point is None or not num_cached < point < len(ids):
            return [list(ids[num_cached:])], None
        return [list(ids[num_cached:point]), list(ids[point:])], point

    # -- phase 3: step -----------------------------------------------------------------

    def _step(self) -> None:
        if len(self._uids):
            try:
                self._batch_step()
            except Exception as e:
                self._fail_batch(e)
        for live in [x for x in self._live.values() if x.alt is not None]:
            try:
                self._alt_step(live)
            except Exception as e:
                self._fail(live, e)

    def _batch_step(self) -> None:
        assert self._pacer is not None
        lives = [self._live[r] for r in self._uids._by_uid.values()]
        num_decoding = sum(not x.prefilling for x in lives)
        num_prefilling = min(len(lives) - num_decoding, self._gen.prefill_batch_size)
        if self._all_prompts_short(lives):
            # A short prompt costs the streams one brief gap; pacing it would only delay
            # its first token and keep the batch from filling (throughput).
            self._gen.prefill_step_size = self.settings.prefill_step_tokens
        else:
            self._gen.prefill_step_size = self._pacer.chunk_tokens(
                num_decoding=num_decoding, num_prefilling=num_prefilling
            )
        t0 = time.perf_counter()
        with self._gen.stats() as st:
            prompt_responses, generation_responses = self._gen.next()
        step_s = time.perf_counter() - t0
        self._pacer.observe(
            step_s=step_s,
            num_decoding=num_decoding,
            prefill_tokens=st.prompt_tokens,
        )
        self.steps += 1
        if num_decoding and st.prompt_tokens:
            self.decode_steps_during_prefill += 1
        self.metrics.prefilled(st.prompt_tokens)
        self._publish_prefill(prompt_responses)
        self._publish_generated(generation_responses)
        if self._trace is not None:
            sync_s = getattr(self._gen, "sync_s", 0.0)
            self._trace.batch = {
                "decoding": num_decoding,
                "prompt_tokens": st.prompt_tokens,
                "step_s": step_s,
                "prefill_s": getattr(st, "prompt_time", 0.0),
                "sync_s": sync_s - self._trace.sync_mark,
                "publish_s": time.perf_counter() - t0 - step_s,
                **(self._gen.kv_layout() if hasattr(self._gen, "kv_layout") else {}),
            }
            self._trace.sync_mark = sync_s

    def _all_prompts_short(self, lives: list[Live]) -> bool:
        limit = self.settings.paced_prompt_tokens
        uncached = [len(x.sub.prompt.token_ids) - x.cached_tokens for x in lives if x.prefilling]
        return bool(uncached) and max(uncached) <= limit

    def _alt_step(self, live: Live) -> None:
        assert live.alt is not None
        tokens = next(live.alt, None)
        if tokens is None:
            self._finish(Finished(live, FinishReason.STOP))
            return
        for token in tokens:
            reason = self._on_token(live, token, None, None)
            if reason is not None:
                self._finish(Finished(live, reason))
                return

    # -- phase 4: publish --------------------------------------------------------------

    def _publish_prefill(self, responses: list[Any]) -> None:
        for r in responses:
            rid = self._uids.request(r.uid)
            live = self._live.get(rid) if rid is not None else None
            if live is None:
                continue
            if r.end_of_prompt:
                live.prefilling = False
                continue
            if r.end_of_segment and live.snapshot_at is not None:
                self._store_snapshot(live, r.uid)
            now = time.monotonic()
            if now - live.progress_at >= PROGRESS_EVERY_S:  # spare the event loop
                live.progress_at = now
                done, total = r.progress
                progress = Progress(rid, live.cached_tokens + done, live.cached_tokens + total)
                self._outbox.put(live.sub.sink, progress)

    def _store_snapshot(self, live: Live, uid: int) -> None:
        # Recurrent state exists only where prefill stopped: store it at the block boundary.
        live.snapshot_at = None
        got = self._gen.extract_cache([uid]).get(uid)
        if got is not None:
            cache, tokens = got
            try:
                self._prefix.store(list(tokens), cache)
            except Exception:
                log.exception("prefix cache snapshot store failed for %s", live.request_id)

    def _publish_generated(self, responses: list[Any]) -> None:
        for r in responses:
            rid = self._uids.request(r.uid)
            live = self._live.get(rid) if rid is not None else None
            if live is None:
                continue
            reason = self._on_token(live, r.token, r.logprobs, r.finish_reason)
            if reason is None:
                continue
            if r.finish_reason is not None:  # the batch already dropped it
                self._finish(Finished(live, reason, r.all_tokens, r.prompt_cache))
            else:
                uid = self._uids.uid(rid)  # type: ignore[arg-type]
                got = self._gen.remove([uid], return_prompt_caches=True).get(uid)
                cache, tokens = got if got else (None, None)
                self._finish(Finished(live, reason, tokens, cache))

    def _on_token(
        self, live: Live, token: int, logprobs: Any, batch_reason: str | None
    ) -> FinishReason | None:
        """Detokenize one token, apply stop rules, queue its Token event."""
        now = time.monotonic()
        sub = live.sub
        text, reason = live.advance(token, self._lm.eos_token_ids, batch_reason)  # type: ignore[union-attr]
        lps = None
        if sub.sampling.logprobs and logprobs is not None:
            lps = [self._logprob(logprobs, token, sub.sampling.top_logprobs)]
        first = live.last_token_at is None
        if first and self._trace is not None:
            self._trace.first_token(sub, now)
        self.metrics.generated(
            sub.request_id, 1, now - (live.last_token_at or sub.submitted_at), is_first=first
        )
        live.last_token_at = now
        self._outbox.put(sub.sink, Token(sub.request_id, text, [token], logprobs=lps))
        return reason

    def _logprob(self, logprobs: Any, token: int, top_n: int) -> TokenLogprob:
        assert self.backend is not None
        return self.backend.token_logprob(self._lm.tokenizer, logprobs, token, top_n)

    def _finish(self, fin: Finished) -> None:
        live = fin.live
        self._live.pop(live.request_id, None)
        self._uids.pop(live.request_id)
        self.metrics.finished(live.request_id)
        self._outbox.put(
            live.sub.sink,
            done_event(
                live.sub,
                fin.reason,
                live.num_generated,
                live.cached_tokens,
                live.served_by,
                live.text.matched_stop,
            ),
        )
        self._stores.add(fin)

    def _fail(self, live: Live, error: Exception) -> None:
        self._live.pop(live.request_id, None)
        self._uids.pop(live.request_id)
        self.metrics.finished(live.request_id)
        self._outbox.put(live.sub.sink, failed_event(live.sub, error))

    def _fail_batch(self, error: Exception) -> None:
        log.exception(
            "engine step failed for model %s; failing %d requests",
            self.name,
            len(self._uids),
            exc_info=error,
        )
        for rid in list(self._uids._by_uid.values()):
            self._fail(self._live[rid], error)
        self._gen.close()
        assert self.backend is not None
        self._gen = self.backend.new_generator(self._lm)

    # -- phase 5: store ----------------------------------------------------------------

    def _store_finished(self, *, idle_store: bool = True) -> None:
        busy = bool(self._live or self._waiting)
        self._stores.flush(self._prefix, busy=busy, idle_store=idle_store)

    @property
    def stores_dropped(self) -> int:
        """Finished sequences never stored (deferred past the cap)."""
        return self._stores.dropped

    def _refresh_memory(self) -> None:
        now = time.monotonic()
        if now - self._memory_at < MEMORY_EVERY_S:
            return
        self._memory_at = now
        assert self.backend is not None
        self.metrics.memory.update(self.backend.memory())

    def _tune_blas(self) -> None:
        if self._blas is not None:
            self._blas.tick(self.name, busy=bool(self._live))


__all__ = ["EngineLoop"]

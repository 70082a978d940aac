"""The engine loop's policy in plain Python: a scripted batch generator stands in for MLX.

Admission against max_running, cancellation (queued and running), max_tokens and EOS,
a failing step, and shutdown, each checked in milliseconds; tests/mlx/engine runs the
same loop on real models.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from omlx.engine.api import (
    Done,
    Failed,
    FinishReason,
    RequestId,
    SamplingParams,
    Started,
    Token,
    TokenLogprob,
)
from omlx.engine.commands import Cancel, EventSink, Shutdown, Submission, Submit
from omlx.engine.loop import EngineLoop
from omlx.engine.metrics import EngineMetrics
from omlx.engine.text.templating import PreparedPrompt
from omlx.settings import EngineSettings

EOS = 0


class FakeDetokenizer:
    def __init__(self) -> None:
        self.last_segment = ""

    def add_token(self, token: int) -> None:
        self.last_segment = f"<{token}>"

    def finalize(self) -> None:
        self.last_segment = ""


class FakeTokenizer:
    has_thinking = False

    @property
    def detokenizer(self) -> FakeDetokenizer:
        return FakeDetokenizer()

    def __len__(self) -> int:
        return 100

    def decode(self, ids: list[int]) -> str:
        return "".join(f"<{i}>" for i in ids)


@dataclass
class FakeSpec:
    vocab_size: int = 100


@dataclass
class FakeLoaded:
    model: Any = None
    tokenizer: FakeTokenizer = field(default_factory=FakeTokenizer)
    spec: FakeSpec = field(default_factory=FakeSpec)
    eos_token_ids: frozenset[int] = frozenset({EOS})
    weight_bytes: int = 123


@dataclass
class Response:
    uid: int
    token: int = 0
    logprobs: Any = None
    finish_reason: str | None = None
    all_tokens: list[int] | None = None
    prompt_cache: Any = None
    end_of_prompt: bool = False
    end_of_segment: bool = False
    progress: tuple[int, int] = (0, 0)


@dataclass
class Stats:
    prompt_tokens: int = 0


class FakeGenerator:
    """Prefills a row in one step, then emits `script[uid]` one token per step."""

    def __init__(self, script: dict[int, list[int]] | None = None) -> None:
        self.prefill_step_size = 0
        self.prefill_batch_size = 8
        self.script = script or {}
        self.rows: dict[int, dict[str, Any]] = {}
        self.next_uid = 0
        self.removed: list[int] = []
        self.closed = False
        self.fail_next = False
        self.finish_cache = False  # finishing rows hand over a prompt cache (to be stored)
        self._stats = Stats()

    def insert_segments(self, segments: list[Any], **kwargs: Any) -> list[int]:
        uids = []
        for i, segs in enumerate(segments):
            uid = self.next_uid
            self.next_uid += 1
            self.rows[uid] = {
                "prompt": sum(len(s) for s in segs),
                "prefilled": False,
                "max_tokens": kwargs["max_tokens"][i],
                "emitted": 0,
            }
            uids.append(uid)
        return uids

    @contextlib.contextmanager
    def stats(self) -> Iterator[Stats]:
        self._stats = Stats()
        yield self._stats

    def next(self) -> tuple[list[Response], list[Response]]:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("step exploded")
        prompt, generated = [], []
        for uid, row in list(self.rows.items()):
            if not row["prefilled"]:
                row["prefilled"] = True
                self._stats.prompt_tokens += row["prompt"]
                prompt.append(Response(uid, end_of_prompt=True))
                continue
            tokens = self.script.get(uid, [])
            token = tokens[row["emitted"]] if row["emitted"] < len(tokens) else 7
            row["emitted"] += 1
            reason = "length" if row["emitted"] >= row["max_tokens"] else None
            if token == EOS:
                reason = "stop"
            if reason is not None:
                del self.rows[uid]
            cache = [f"kv{uid}"] if reason and self.finish_cache else None
            generated.append(
                Response(
                    uid,
                    token,
                    finish_reason=reason,
                    all_tokens=[1, 2] if reason else None,
                    prompt_cache=cache,
                )
            )
        return prompt, generated

    def remove(self, uids: list[int], return_prompt_caches: bool = False) -> Any:
        for uid in uids:
            self.rows.pop(uid, None)
            self.removed.append(uid)
        return {uid: (["kv"], [1, 2, 3]) for uid in uids} if return_prompt_caches else None

    def extract_cache(self, uids: list[int]) -> dict[int, Any]:
        return {}

    def close(self) -> None:
        self.closed = True


class FakeBackend:
    def __init__(self, script: dict[int, list[int]] | None = None) -> None:
        self.script = script
        self.generators: list[FakeGenerator] = []
        self.released = False

    def load(self, name: str, path: Any) -> FakeLoaded:
        return FakeLoaded()

    def new_generator(self, loaded: Any) -> FakeGenerator:
        self.generators.append(FakeGenerator(self.script))
        return self.generators[-1]

    def eos_stops(self, eos_token_ids: Any) -> Any:
        return tuple(eos_token_ids)

    def sampler(self, params: SamplingParams, vocab_size: int) -> Any:
        return None

    def logits_processors(
        self, params: SamplingParams, n: int, forced: Any, *, grammar: Any = None
    ) -> list[Any]:
        return []

    def token_logprob(self, tokenizer: Any, logprobs: Any, token: int, top_n: int) -> Any:
        return TokenLogprob(f"<{token}>", -0.5, [])

    def memory(self) -> dict[str, int]:
        return {"mlx_active_bytes": 1, "mlx_peak_bytes": 2, "mlx_cache_bytes": 3}

    def release(self) -> None:
        self.released = True

    def gil_switch_interval_s(self) -> float | None:
        return None


class RecordingPrefix:
    """A prefix cache that records what the loop stores (and never has a hit)."""

    defer_stores = False

    def __init__(self) -> None:
        self.stored: list[tuple[list[int], Any]] = []
        self.calls: list[str] = []

    def fetch(self, ids: list[int]) -> tuple[None, int]:
        self.calls.append("fetch")
        return None, 0

    def store(self, tokens: list[int], cache: Any) -> None:
        self.calls.append("store")
        self.stored.append((list(tokens), cache))


class Harness:
    def __init__(
        self, max_running: int = 2, script: dict[int, list[int]] | None = None, **settings: Any
    ):
        self.aloop = asyncio.new_event_loop()
        self.backend = FakeBackend(script)
        self.loop = EngineLoop(
            name="fake",
            path=Path("/nonexistent"),
            # The real freeze would hide the whole test process from the collector.
            settings=EngineSettings(max_running=max_running, **{"freeze_gc": False, **settings}),
            metrics=EngineMetrics("fake"),
            backend=self.backend,
        )
        self.loop.setup()
        self.prefix = RecordingPrefix()
        self.loop._prefix = self.prefix  # type: ignore[assignment]
        self.queues: dict[str, asyncio.Queue[Any]] = {}

    @property
    def gen(self) -> FakeGenerator:
        return self.backend.generators[-1]

    def submit(self, rid: str, prompt_len: int = 3, max_tokens: int = 4) -> None:
        q: asyncio.Queue[Any] = asyncio.Queue()
        self.queues[rid] = q
        sub = Submission(
            request_id=RequestId(rid),
            prompt=PreparedPrompt(token_ids=list(range(1, prompt_len + 1)), max_tokens=max_tokens),
            sampling=SamplingParams(temperature=0.0),
            stop=[],
            sink=EventSink(self.aloop, q),
        )
        self.loop.commands.put(Submit(sub))

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            self.loop.tick()
        self.aloop.run_until_complete(asyncio.sleep(0))

    def events(self, rid: str) -> list[Any]:
        q = self.queues[rid]
        out = []
        while not q.empty():
            out.append(q.get_nowait())
        return out

    def close(self) -> None:
        self.aloop.close()


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.close()


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_admission_holds_requests_past_max_running(h: Harness) -> None:
    for rid in ("a", "b", "c"):
        h.submit(rid, max_tokens=2)
    h.tick()
    assert kinds(h.events("a"))[0] == "Started" and kinds(h.events("b"))[0] == "Started"
    assert h.events("c") == []  # queued: two are running
    assert h.loop.metrics.queued == 1
    h.tick(2)  # a and b generate their two tokens and finish
    h.tick()  # c is admitted now that slots are free
    assert kinds(h.events("c")) == ["Started"]


def test_max_tokens_ends_with_length_and_counts_tokens(h: Harness) -> None:
    h.submit("a", max_tokens=3)
    h.tick(4)
    events = h.events("a")
    assert kinds(events) == ["Started", "Token", "Token", "Token", "Done"]
    done = events[-1]
    assert isinstance(done, Done)
    assert done.finish_reason == FinishReason.LENGTH
    assert done.completion_tokens == 3 and done.prompt_tokens == 3


def test_eos_ends_with_stop_and_its_text_is_not_emitted() -> None:
    h = Harness(script={0: [5, EOS]})
    try:
        h.submit("a", max_tokens=10)
        h.tick(3)
        events = h.events("a")
        tokens = [e for e in events if isinstance(e, Token)]
        assert [t.text for t in tokens] == ["<5>", ""]
        assert isinstance(events[-1], Done) and events[-1].finish_reason == FinishReason.STOP
    finally:
        h.close()


def test_cancel_of_a_queued_request_never_starts_it() -> None:
    h = Harness(max_running=1)
    try:
        h.submit("a", max_tokens=5)
        h.submit("b", max_tokens=5)
        h.tick()
        h.loop.commands.put(Cancel(RequestId("b")))
        h.tick()
        events = h.events("b")
        assert kinds(events) == ["Done"]
        assert events[0].finish_reason == FinishReason.CANCELLED
        assert events[0].completion_tokens == 0
    finally:
        h.close()


def test_cancel_of_a_running_request_frees_its_row_and_admits_the_next() -> None:
    h = Harness(max_running=1)
    try:
        h.submit("a", max_tokens=50)
        h.submit("b", max_tokens=2)
        h.tick(3)  # a prefilled and generated two tokens
        h.loop.commands.put(Cancel(RequestId("a")))
        h.tick()
        a = h.events("a")
        assert isinstance(a[-1], Done) and a[-1].finish_reason == FinishReason.CANCELLED
        assert a[-1].completion_tokens == 2
        assert h.gen.removed == [0]
        assert kinds(h.events("b")) == ["Started"]  # admitted in the same tick
        # What the cancelled row had computed goes to the prefix cache, as a finish's does.
        assert h.prefix.stored == [([1, 2, 3], ["kv"])]
    finally:
        h.close()


def _stored(h: Harness) -> list[Any]:
    return [cache for _, cache in h.prefix.stored]


def test_finished_sequences_are_stored_at_once_by_default() -> None:
    h = Harness(max_running=2)
    try:
        h.gen.finish_cache = True
        h.submit("a", max_tokens=2)
        h.submit("b", max_tokens=6)
        h.tick(3)  # prefill, two tokens: a finishes while b decodes
        assert _stored(h) == [["kv0"]]
    finally:
        h.close()


@contextlib.contextmanager
def deferring(**max_tokens: int) -> Iterator[Harness]:
    """A harness whose prefix cache defers stores, one request per keyword (its
    max_tokens), every finishing row handing over a cache to store."""
    h = Harness(max_running=len(max_tokens))
    try:
        h.prefix.defer_stores = True
        h.gen.finish_cache = True
        for rid, n in max_tokens.items():
            h.submit(rid, max_tokens=n)
        yield h
    finally:
        h.close()


def test_deferred_stores_wait_for_an_idle_engine_newest_first() -> None:
    with deferring(a=2, b=3, c=6) as h:
        h.tick(4)  # a and b have finished; c still decodes
        assert kinds(h.events("a"))[-1] == "Done" and kinds(h.events("b"))[-1] == "Done"
        assert _stored(h) == []  # nothing copied out while a stream decodes
        h.tick(3)  # c finishes: the engine is idle now, one store per tick
        assert kinds(h.events("c"))[-1] == "Done"
        assert _stored(h) == [["kv2"]]
        h.tick()
        assert _stored(h) == [["kv2"], ["kv1"]]  # one per tick
        h.tick()
        assert _stored(h) == [["kv2"], ["kv1"], ["kv0"]]
        assert h.loop.stores_dropped == 0


def test_deferred_stores_past_the_cap_drop_the_oldest(monkeypatch) -> None:
    import omlx.engine.store_queue as store_queue

    monkeypatch.setattr(store_queue, "MAX_DEFERRED_STORES", 2)
    with deferring(a=2, b=3, c=4, d=9) as h:
        h.tick(6)  # a, b, c finished while d decodes: a (the oldest) is dropped
        assert h.loop.stores_dropped == 1 and _stored(h) == []
        h.tick(8)
        assert _stored(h) == [["kv3"], ["kv2"], ["kv1"]]


class SizedCache:
    """A layer cache that reports its size, as mlx-lm's caches do (nbytes)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_deferred_stores_past_the_byte_cap_drop_the_oldest(monkeypatch) -> None:
    import omlx.engine.store_queue as store_queue

    monkeypatch.setattr(store_queue, "MAX_DEFERRED_STORE_BYTES", 250)
    with deferring(a=2, b=3, c=4, d=9) as h:
        h.tick()  # prefill
        for _ in range(5):
            h.tick()  # a, b, c finish in turn while d decodes
            for fin in h.loop._stores.pending:
                fin.cache = [SizedCache(60), SizedCache(40)]  # 100 bytes each
        assert h.loop.stores_dropped == 1  # 300 > 250: the oldest (a) went
        h.tick(8)  # d finishes; then d, c, b are stored, newest first
        stored = _stored(h)
        assert stored[0] == ["kv3"] and [c[0].nbytes for c in stored[1:]] == [60, 60]


def test_a_cancelled_request_is_stored_at_once_even_when_stores_wait() -> None:
    with deferring(a=50, b=50) as h:
        h.tick(2)
        h.loop.commands.put(Cancel(RequestId("a")))
        h.tick()  # b still decodes
        assert h.prefix.stored == [([1, 2, 3], ["kv"])]


def test_a_retry_arriving_with_the_cancel_looks_up_what_the_cancel_stored() -> None:
    h = Harness(max_running=2)
    try:
        h.submit("a", max_tokens=50)
        h.tick(2)
        h.loop.commands.put(Cancel(RequestId("a")))
        h.submit("a-retry", max_tokens=1)  # drained in the same tick as the cancel
        h.tick()
        assert h.prefix.calls[-2:] == ["store", "fetch"]
    finally:
        h.close()


def test_a_failing_step_fails_its_requests_and_the_next_request_is_served(h: Harness) -> None:
    h.submit("a", max_tokens=5)
    h.tick(2)
    first = h.gen
    first.fail_next = True
    h.tick()
    assert isinstance(h.events("a")[-1], Failed)
    assert first.closed and len(h.backend.generators) == 2  # a fresh generator
    h.submit("b", max_tokens=1)
    h.tick(3)
    assert kinds(h.events("b")) == ["Started", "Token", "Done"]


def test_shutdown_cancels_queued_at_once_and_running_after_the_grace() -> None:
    h = Harness(max_running=1)
    try:
        h.submit("a", max_tokens=1000)
        h.submit("b")
        h.tick(2)
        h.loop.commands.put(Shutdown(grace_s=0.0))
        h.tick()
        b = h.events("b")
        assert kinds(b) == ["Done"] and b[0].finish_reason == FinishReason.CANCELLED
        assert h.loop.should_exit()  # the grace is over: a is cancelled, nothing is left
        h.aloop.run_until_complete(asyncio.sleep(0))
        a = h.events("a")
        assert isinstance(a[-1], Done) and a[-1].finish_reason == FinishReason.CANCELLED
        h.submit("c")
        h.tick()
        c = h.events("c")
        assert isinstance(c[0], Failed)  # refused while shutting down
    finally:
        h.close()


def test_started_reports_prompt_tokens_and_memory_comes_from_the_backend(h: Harness) -> None:
    h.submit("a", prompt_len=7, max_tokens=1)
    h.tick()
    started = h.events("a")[0]
    assert isinstance(started, Started) and started.prompt_tokens == 7
    assert h.loop.metrics.memory["mlx_peak_bytes"] == 2
    assert h.loop.metrics.memory["model_bytes"] == 123


def test_a_loaded_engine_freezes_what_loading_left_and_unloading_collects(monkeypatch) -> None:
    from omlx.engine import loop as loop_module

    calls: list[str] = []
    monkeypatch.setattr(loop_module, "freeze_loaded", lambda: calls.append("freeze"))
    monkeypatch.setattr(loop_module, "collect_unloaded", lambda: calls.append("collect"))
    h = Harness(freeze_gc=True)
    assert calls == ["freeze"]
    h.loop._teardown()
    assert calls == ["freeze", "collect"]
    h.close()
    calls.clear()
    off = Harness(freeze_gc=False)
    off.loop._teardown()
    off.close()
    assert calls == []


def test_step_trace_is_off_by_default(h: Harness) -> None:
    assert h.loop._trace is None and h.loop._outbox.trace is None


def test_step_trace_writes_a_row_per_batch_step(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    h = Harness(step_trace=str(path))
    try:
        h.submit("a", prompt_len=3, max_tokens=3)
        h.submit("b", prompt_len=4, max_tokens=3)
        for _ in range(4):  # prefill, then three tokens each
            h.tick()  # a tick, then the event loop runs its hand-off
        h.tick()  # nothing left: the engine marks itself idle and writes its rows
    finally:
        h.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    meta, rows, last = lines[0], lines[1:-1], lines[-1]
    assert last["kind"] == "idle" and last["t"] >= rows[-1]["t"]
    assert meta["kind"] == "meta" and meta["model"] == "fake" and meta["engine_tid"] > 0
    assert [r["decoding"] for r in rows] == [0, 2, 2, 2]  # one row per batch step
    assert rows[0]["prompt_tokens"] == 7 and len(rows[0]["admit_waits_s"]) == 2
    assert sum(len(r.get("first_token_s", [])) for r in rows) == 2
    # Each step's hand-off ran on the event loop before the next step: its lag is in
    # the next row.
    assert all(len(r["lags_s"]) == 1 for r in rows[1:])
    for r in rows:
        assert r["step_s"] >= 0 and r["publish_s"] >= 0 and r["tick_s"] >= r["step_s"]


def test_tokens_queued_behind_a_token_are_read_as_one() -> None:
    from omlx.engine.parsed_stream import coalesce

    async def go() -> tuple[Any, Any, int]:
        q: asyncio.Queue[Any] = asyncio.Queue()
        rid = RequestId("r")
        first = Token(rid, "a", [1])
        for event in (
            Token(rid, "b", [2], logprobs=[TokenLogprob("b", -1.0)]),
            Token(rid, "", [3]),
        ):
            q.put_nowait(event)
        q.put_nowait(Done(rid, FinishReason.STOP, 3, 3))
        q.put_nowait(Token(rid, "late", [9]))
        merged, held = coalesce(first, q)
        return merged, held, q.qsize()

    merged, held, left = asyncio.run(go())
    assert merged.text == "ab" and merged.token_ids == [1, 2, 3]
    assert merged.logprobs == [TokenLogprob("b", -1.0)]
    assert isinstance(held, Done) and left == 1  # stops at the first other event


def test_the_backend_may_lower_the_gil_switch_interval_never_raise_it() -> None:
    class GpuLike(FakeBackend):
        def __init__(self, interval: float) -> None:
            super().__init__()
            self.interval = interval

        def gil_switch_interval_s(self) -> float | None:
            return self.interval

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        for interval, expected in ((0.0007, 0.0007), (0.002, 0.0007)):
            loop = EngineLoop(
                name="fake",
                path=Path("/nonexistent"),
                settings=EngineSettings(),
                metrics=EngineMetrics("fake"),
                backend=GpuLike(interval),
            )
            loop.setup()
            assert sys.getswitchinterval() == pytest.approx(expected)
    finally:
        sys.setswitchinterval(before)

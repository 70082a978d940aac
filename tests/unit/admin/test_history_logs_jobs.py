"""The admin's server-side state: stats history, the log tail, jobs, bench validation."""

from __future__ import annotations

import asyncio
import logging

import pytest

from omlx.errors import InvalidRequest, NotFound
from omlx.schemas.admin import BenchRequest
from omlx.schemas.stats import CacheStats, MemoryStats, ModelStats, Percentiles, StatsSnapshot
from omlx.server.admin import bench
from omlx.server.admin.history import SERIES, History, point_of
from omlx.server.admin.jobs import Jobs
from omlx.server.admin.log_buffer import LogBuffer


def _snap(t: float, models: list[ModelStats], running: int = 0) -> StatsSnapshot:
    return StatsSnapshot(
        time=t, uptime_s=t, version="x", running=running, generation_tps=running * 10.0,
        models=models, memory=MemoryStats(mlx_active_bytes=100 + int(t)),
        cache=CacheStats(hit_tokens=7, cold_hit_tokens=2),
    )  # fmt: skip


def test_point_takes_the_slowest_models_percentiles() -> None:
    fast = ModelStats(model="a", ttft_ms=Percentiles(p50=10, p95=20), itl_ms=Percentiles())
    slow = ModelStats(model="b", ttft_ms=Percentiles(p50=30, p95=90), itl_ms=Percentiles(p50=5))
    point = point_of(_snap(1.0, [fast, slow], running=2))
    assert set(point) == set(SERIES)
    assert (point["ttft_p50_ms"], point["ttft_p95_ms"]) == (30, 90)
    assert point["itl_p50_ms"] == 5 and point["itl_p95_ms"] is None
    assert point["generation_tps"] == 20 and point["cache_hit_tokens"] == 7


def test_history_is_bounded_and_column_wise_with_gaps_for_absent_models() -> None:
    clock = iter(range(100))
    models = {0: [ModelStats(model="a", running=1)], 1: [], 2: [ModelStats(model="b")]}

    def snapshot() -> StatsSnapshot:
        t = next(clock)
        return _snap(float(t), models.get(t % 3, []))

    history = History(snapshot, interval_s=1.0, window_s=5.0)
    for _ in range(8):
        history.sample()
    cols = history.columns()
    assert cols.time == [3.0, 4.0, 5.0, 6.0, 7.0]  # the last 5 s only
    assert cols.series["mlx_active_bytes"] == [103, 104, 105, 106, 107]
    assert cols.models["a"]["running"] == [1.0, None, None, 1.0, None]
    assert cols.models["b"]["running"] == [None, None, 0.0, None, None]


def test_sampler_survives_a_failing_snapshot() -> None:
    calls = []

    async def main() -> None:
        third = asyncio.Event()

        def snapshot() -> StatsSnapshot:
            calls.append(1)
            if len(calls) == 3:
                third.set()
            if len(calls) == 1:
                raise RuntimeError("boom")
            return _snap(float(len(calls)), [])

        history = History(snapshot, interval_s=0.01, window_s=1.0)
        task = asyncio.create_task(history.run())
        await asyncio.wait_for(third.wait(), 10)
        task.cancel()
        assert len(history.columns().time) >= 2

    asyncio.run(main())


def test_log_buffer_filters_by_level_and_follows_by_sequence() -> None:
    buffer = LogBuffer(capacity=3)
    log = logging.getLogger("omlx.test.admin")
    log.setLevel(logging.DEBUG)
    log.addHandler(buffer)
    try:
        log.debug("d1")
        log.info("i1")
        log.warning("w1")
        log.error("e1")  # capacity 3: d1 is gone
        tail = buffer.tail(level="INFO")
        assert [r.message for r in tail.records] == ["i1", "w1", "e1"]
        assert [r.message for r in buffer.tail(level="WARNING").records] == ["w1", "e1"]
        assert buffer.tail(after=tail.last_seq).records == []
        log.info("i2")
        assert [r.message for r in buffer.tail(after=tail.last_seq).records] == ["i2"]
        try:
            raise ValueError("bad thing")
        except ValueError:
            log.exception("failed")
        assert "ValueError: bad thing" in buffer.tail().records[-1].message
    finally:
        log.removeHandler(buffer)


def test_jobs_report_progress_results_and_errors() -> None:
    async def main() -> None:
        jobs = Jobs()

        def work(job):
            job.update(progress=0.5, message="half", detail={"a": 1})
            job.update(detail={"b": 2})
            return {"ok": True}

        def failing(job):
            raise InvalidRequest("no such file")

        done = jobs.start("import", "x", work)
        bad = jobs.start("import", "y", failing)
        await jobs.settled()
        assert not jobs.running("import")
        status = jobs.get(done.id).status()
        assert (status.state, status.progress, status.result) == ("done", 1.0, {"ok": True})
        assert status.detail == {"a": 1, "b": 2} and status.message == "half"
        failed = jobs.get(bad.id).status()
        assert (failed.state, failed.error) == ("failed", "no such file")
        assert [s.title for s in jobs.list("import")] == ["y", "x"]

    asyncio.run(main())


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"model": ""}, "model"),
        ({"concurrency": []}, "concurrency"),
        ({"concurrency": [0]}, "concurrency"),
        ({"concurrency": [1000]}, "concurrency"),
        ({"prompt_words": [0]}, "prompt_words"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"requests": -1}, "requests"),
        ({"concurrency": [256], "prompt_words": [1, 2, 3, 4, 5]}, "requests"),
    ],
)
def test_bench_requests_are_bounded(change: dict, param: str) -> None:
    fields = {"model": "m", "concurrency": [1, 2], "prompt_words": [16], **change}
    with pytest.raises(InvalidRequest) as e:
        bench.validate(BenchRequest(**fields))
    assert e.value.param == param


def test_bench_plan_and_run_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bench, "bench_dir", lambda: tmp_path)
    plan = bench.validate(BenchRequest(model="m", concurrency=[1, 4], prompt_words=[8, 64]))
    assert plan == [(1, 8, 2), (4, 8, 8), (1, 64, 2), (4, 64, 8)]
    record = bench.BenchRun(id="20261204-101010-abcdef", started=1.0, model="m",
                            request=BenchRequest(model="m"), target="this server",
                            levels=[{"aggregate_tps": 3.5}, {"aggregate_tps": 7.0}])  # fmt: skip
    bench.save(record)
    (tmp_path / "notes.json").write_text("not a run")
    [summary] = bench.summaries()
    assert (summary.id, summary.levels, summary.best_tps) == (record.id, 2, 7.0)
    assert bench.load(record.id).levels == record.levels
    with pytest.raises(NotFound):
        bench.load("../../etc/passwd")
    bench.delete(record.id)
    assert bench.summaries() == []

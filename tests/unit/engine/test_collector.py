"""engine.freeze_gc: what a model load leaves alive is hidden from the cyclic collector,
an unload collects once; the step trace reports the collector's pauses."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path

import pytest

from omlx.engine.collector import CollectorPauses, collect_unloaded, freeze_loaded
from omlx.engine.step_trace import StepTrace


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> weakref.ref:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def thawed():
    yield
    gc.unfreeze()


def test_a_load_collects_first_and_freezes_what_survives(thawed) -> None:
    garbage = _cycle()
    freeze_loaded()
    assert garbage() is None  # collected before the freeze, not kept forever
    assert gc.get_freeze_count() > 0
    assert gc.get_count()[2] == 0  # nothing left for a full pass to walk but new objects


def test_frozen_cycles_wait_for_the_unload(thawed) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    freeze_loaded()  # alive now: frozen with the rest
    del a, b  # a cycle among frozen objects: the collector does not look at it
    gc.collect()
    assert ref() is not None
    collect_unloaded()
    assert ref() is None
    assert gc.get_freeze_count() > 0  # the survivors are frozen again


def test_pauses_are_summed_between_takes() -> None:
    pauses = CollectorPauses()
    try:
        assert pauses.take() == (0.0, 0, -1)
        gc.collect()
        seconds, count, oldest = pauses.take()
        assert count >= 1 and oldest == 2 and seconds >= 0
        assert pauses.take() == (0.0, 0, -1)
    finally:
        pauses.close()
    gc.collect()
    assert pauses.take() == (0.0, 0, -1)  # closed: no longer called


def test_the_step_trace_reports_a_collection_in_its_row(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    trace = StepTrace(path, "m")
    trace.step({"decoding": 1})
    gc.collect()
    trace.step({"decoding": 1})
    trace.close()
    rows = [json.loads(x) for x in path.read_text().splitlines()][1:]
    assert "gc_s" not in rows[0] or rows[0]["gc_gen"] < 2
    assert rows[1]["gc_gen"] == 2 and rows[1]["gc_n"] >= 1 and rows[1]["gc_s"] >= 0
    assert trace._gc._on_gc not in gc.callbacks


def test_omlx_serve_freezes_the_front_end_unless_told_not_to(monkeypatch) -> None:
    from omlx.cli.commands.serve import freeze_front_end
    from omlx.engine import collector
    from omlx.settings import EngineSettings, Settings

    calls: list[bool] = []
    monkeypatch.setattr(collector, "freeze_loaded", lambda: calls.append(True))
    assert freeze_front_end(Settings())
    assert not freeze_front_end(Settings(engine=EngineSettings(freeze_gc=False)))
    assert calls == [True]

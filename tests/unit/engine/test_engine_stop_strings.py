"""Stop strings over streamed text: never emitted, prefixes held back, split anywhere."""

from __future__ import annotations

import pytest

from omlx.engine.text.stop_strings import StopStringMatcher


def _run(stops, chunks):
    m = StopStringMatcher(tuple(stops))
    out = [m.feed(c) for c in chunks]
    return "".join(out) + m.flush(), m


@pytest.mark.parametrize(
    ("stops", "chunks", "expected", "matched"),
    [
        (["END"], ["hello ", "world"], "hello world", None),
        (["END"], ["hello E", "ND more"], "hello ", "END"),
        (["END"], ["hello E", "N", "D"], "hello ", "END"),
        (["END"], ["E", "NJOY"], "ENJOY", None),
        (["\n\n", "###"], ["a\n", "\nb"], "a", "\n\n"),
        (["###", "##x"], ["ab##", "#"], "ab", "###"),
        (["stop"], ["xsto"], "xsto", None),  # held, then flushed at the end
        ([], ["anything"], "anything", None),
        (["a"], ["bab"], "b", "a"),
    ],
)
def test_stop_strings(stops, chunks, expected, matched):
    text, m = _run(stops, chunks)
    assert text == expected
    assert m.matched == matched
    assert m.stopped == (matched is not None)


def test_prefix_is_held_until_decided():
    m = StopStringMatcher(("<|end|>",))
    assert m.feed("hi <|e") == "hi "
    assert m.feed("x") == "<|ex"


def test_nothing_after_a_stop():
    m = StopStringMatcher(("X",))
    assert m.feed("aXb") == "a"
    assert m.feed("more") == ""
    assert m.flush() == ""

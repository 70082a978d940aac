"""Feeding helpers: every input is also fed split at every boundary and in random chunks."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Iterator

from omlx.engine.text.parsers import OutputParser, ParsedDelta


def run(parser: OutputParser, chunks: list[str]) -> ParsedDelta:
    total = ParsedDelta()
    for delta in [*(parser.feed(chunk) for chunk in chunks), parser.finish()]:
        total.content += delta.content
        total.reasoning += delta.reasoning
        total.tool_calls.extend(delta.tool_calls)
    return total


def chunkings(text: str, *, seed: int = 0, num_random: int = 20) -> Iterator[list[str]]:
    yield [text]
    yield list(text)
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]
    if len(text) < 2:
        return
    rng = random.Random(seed)
    for _ in range(num_random):
        cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 8))))
        bounds = [0, *cuts, len(text)]
        yield [text[a:b] for a, b in itertools.pairwise(bounds)]


def summary(delta: ParsedDelta) -> tuple[str, str, list[tuple[str, object]]]:
    calls = [(call.name, json.loads(call.arguments)) for call in delta.tool_calls]
    return delta.content, delta.reasoning, calls


def assert_all_chunkings(make: Callable[[], OutputParser], text: str, expected: tuple) -> None:
    for chunks in chunkings(text):
        got = summary(run(make(), chunks))
        assert got == expected, f"chunks={chunks!r}"

"""Reasoning split: (output, expected) tables, fed in every chunking."""

from __future__ import annotations

import functools

import pytest

from omlx.engine.text.parsers import make_output_parser, prompt_ends_in_think
from tests.unit.parsers.streaming import assert_all_chunkings, run

THINK_TEMPLATE = "{% if enable_thinking %}<think>\n{% endif %}<tool_call>"
H = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'

ROWS = [
    # (output, prompt_ends_in_think, tools_enabled, expected)
    ("<think>\nLet me see.\n</think>\n\nParis.", False, False, ("Paris.", "Let me see.", [])),
    ("<think></think>Hi", False, False, ("Hi", "", [])),
    ("Straight answer.", False, False, ("Straight answer.", "", [])),
    ("Let me see.\n</think>\n\nParis.", True, False, ("Paris.", "Let me see.", [])),
    ("\nhmm < 3 and </thin", True, False, ("", "hmm < 3 and </thin", [])),
    ("<think>\nstill thinking", False, False, ("", "still thinking", [])),
    ("a</think>b", False, False, ("ab", "", [])),
    ("<think>x</think>\n" + H, False, True, ("", "x", [("f", {"a": 1})])),
    # Tool markup inside reasoning is thought, not a call.
    ("<think>maybe " + H + "</think>ok", False, True, ("ok", "maybe " + H, [])),
    ("<think>a</think>b <thin", False, False, ("b <thin", "a", [])),
]


@pytest.mark.parametrize(("text", "in_think", "tools", "expected"), ROWS)
def test_reasoning_in_every_chunking(text: str, in_think: bool, tools: bool, expected) -> None:
    make = functools.partial(
        make_output_parser,
        chat_template=THINK_TEMPLATE,
        model_type="qwen3",
        tools_enabled=tools,
        thinking=None,
        prompt_ends_in_think=in_think,
    )
    assert_all_chunkings(make, text, expected)


def test_reasoning_streams_while_thinking() -> None:
    parser = make_output_parser(
        chat_template=THINK_TEMPLATE, model_type=None, tools_enabled=False, thinking=True
    )
    assert parser.feed("<think>").is_empty
    assert parser.feed("Step one").reasoning == "Step one"
    assert parser.feed(", two</th").reasoning == ", two"
    delta = parser.feed("ink>Done")
    assert (delta.reasoning, delta.content) == ("", "Done")


def test_models_without_thinking_pass_text_through() -> None:
    parser = make_output_parser(
        chat_template="{{ messages }}", model_type="llama", tools_enabled=False, thinking=None
    )
    assert run(parser, ["<think>x</think>"]).content == "<think>x</think>"


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [("<|im_start|>assistant\n<think>\n", True), ("<|im_start|>assistant\n", False)],
)
def test_prompt_ends_in_think(prompt: str, expected: bool) -> None:
    assert prompt_ends_in_think(prompt) is expected

"""Tool-call parsing per format: (output, expected) tables, fed in every chunking."""

from __future__ import annotations

import functools

import pytest

from omlx.engine.text.parsers import make_output_parser
from tests.unit.parsers.streaming import assert_all_chunkings, run

HERMES_TEMPLATE = "{% for tool in tools %}<tools>{{ tool }}</tools>{% endfor %}<tool_call>"
CODER_TEMPLATE = "<tool_call>\n<function={{ name }}>\n<parameter={{ p }}>"
MISTRAL_TEMPLATE = "[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS][TOOL_CALLS]"
LLAMA_TEMPLATE = "<|start_header_id|>ipython<|end_header_id|><|python_tag|><|eom_id|>"

H = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

CASES = {
    "hermes": (
        HERMES_TEMPLATE,
        [
            (H, ("", "", [("get_weather", {"city": "Paris"})])),
            (
                "Let me check.\n\n" + H,
                ("Let me check.", "", [("get_weather", {"city": "Paris"})]),
            ),
            (
                H + "\n" + H.replace("Paris", "Rome") + "\n",
                ("", "", [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]),
            ),
            (
                '<tool_call>{"name": "f", "arguments": "{\\"x\\": [1, 2]}"}</tool_call>',
                ("", "", [("f", {"x": [1, 2]})]),
            ),
            ('<tool_call>{"name": "now"}</tool_call>', ("", "", [("now", {})])),
            # The end marker inside a JSON string (sampled once by SmolLM2 under a grammar).
            (
                '<tool_call>\n{"name": "f", "arguments": {"city": "PM}}</tool_call>", '
                '"q": "a\\"</tool_call>"}}\n</tool_call> done',
                ("done", "", [("f", {"city": "PM}}</tool_call>", "q": 'a"</tool_call>'})]),
            ),
            (
                '<tool_call>{"name": "f", "arguments": {"x": "</tool_call>',
                ('<tool_call>{"name": "f", "arguments": {"x": "</tool_call>', "", []),
            ),
            # Malformed: bad JSON and unclosed tags come back as text, verbatim.
            (
                "x <tool_call>{not json}</tool_call> y",
                ("x <tool_call>{not json}</tool_call> y", "", []),
            ),
            ('<tool_call>{"name": "f", "argu', ('<tool_call>{"name": "f", "argu', "", [])),
            ("a < b and <tool_ca", ("a < b and <tool_ca", "", [])),
            ("plain answer\n", ("plain answer\n", "", [])),
            ("", ("", "", [])),
        ],
    ),
    "qwen3_coder": (
        CODER_TEMPLATE,
        [
            (
                "<tool_call>\n<function=run>\n<parameter=cmd>\nls -la\n</parameter>\n"
                "<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>",
                ("", "", [("run", {"cmd": "ls -la", "timeout": 30})]),
            ),
            (
                "Sure.\n<tool_call>\n<function=edit>\n<parameter=opts>\n"
                '{"a": [1, true]}\n</parameter>\n<parameter=text>\nline1\nline2\n'
                "</parameter>\n</function>\n</tool_call>",
                ("Sure.", "", [("edit", {"opts": {"a": [1, True]}, "text": "line1\nline2"})]),
            ),
            (
                "<function=ping>\n</function>",
                ("", "", [("ping", {})]),
            ),
            (
                "<tool_call>\n<function=a>\n</function>\n<function=b>\n<parameter=x>\n"
                "y\n</parameter>\n</function>\n</tool_call>",
                ("", "", [("a", {}), ("b", {"x": "y"})]),
            ),
            (
                "<tool_call>\n<function=broken\n</tool_call>",
                ("<tool_call>\n<function=broken\n</tool_call>", "", []),
            ),
            ("<tool_call>\n<function=run>", ("<tool_call>\n<function=run>", "", [])),
        ],
    ),
    "llama3": (
        LLAMA_TEMPLATE,
        [
            (
                '{"name": "search", "parameters": {"q": "mlx"}}',
                ("", "", [("search", {"q": "mlx"})]),
            ),
            (
                ' {"type": "function", "name": "a", "parameters": {}}; '
                '{"name": "b", "parameters": {"n": 2}}',
                ("", "", [("a", {}), ("b", {"n": 2})]),
            ),
            (
                'Calling.<|python_tag|>{"name": "s", "parameters": {"q": 1}}<|eom_id|>',
                ("Calling.", "", [("s", {"q": 1})]),
            ),
            # JSON that is not a call stays content.
            ('{"name": "Ada", "age": 36}', ('{"name": "Ada", "age": 36}', "", [])),
            ('{"answer": 42}', ('{"answer": 42}', "", [])),
            ("Hello {name}", ("Hello {name}", "", [])),
            ("<|python_tag|>print(1)", ("<|python_tag|>print(1)", "", [])),
        ],
    ),
    "mistral": (
        MISTRAL_TEMPLATE,
        [
            (
                '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}]',
                ("", "", [("add", {"a": 1, "b": 2})]),
            ),
            (
                '[TOOL_CALLS] [{"name": "a", "arguments": {}}, {"name": "b", "arguments": '
                '{"x": "y"}}]</s>',
                ("", "", [("a", {}), ("b", {"x": "y"})]),
            ),
            (
                'OK [TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]mul[ARGS]{"b": [2]}',
                ("OK", "", [("add", {"a": 1}), ("mul", {"b": [2]})]),
            ),
            (
                '[TOOL_CALLS]get[CALL_ID]a1b2c3d4e[ARGS]{"k": "v"}',
                ("", "", [("get", {"k": "v"})]),
            ),
            ('[TOOL_CALLS]add[ARGS]{"a": 1', ('[TOOL_CALLS]add[ARGS]{"a": 1', "", [])),
            ("[TOOL]", ("[TOOL]", "", [])),
        ],
    ),
}

PARAMS = [
    pytest.param(template, text, expected, id=f"{fmt}-{i}")
    for fmt, (template, rows) in CASES.items()
    for i, (text, expected) in enumerate(rows)
]


@pytest.mark.parametrize(("template", "text", "expected"), PARAMS)
def test_tool_calls_in_every_chunking(template: str, text: str, expected: tuple) -> None:
    make = functools.partial(
        make_output_parser,
        chat_template=template,
        model_type=None,
        tools_enabled=True,
        thinking=None,
    )
    assert_all_chunkings(make, text, expected)


@pytest.mark.parametrize("template", [HERMES_TEMPLATE, CODER_TEMPLATE, MISTRAL_TEMPLATE])
def test_markup_is_plain_content_without_tools(template: str) -> None:
    text = H + ' [TOOL_CALLS]f[ARGS]{"a": 1}'
    parser = make_output_parser(
        chat_template=template, model_type=None, tools_enabled=False, thinking=None
    )
    assert run(parser, [text]).content == text


def test_call_ids_are_unique_and_arguments_are_json_text() -> None:
    parser = make_output_parser(
        chat_template=HERMES_TEMPLATE, model_type=None, tools_enabled=True, thinking=None
    )
    calls = run(parser, [H, H]).tool_calls
    assert len(calls) == 2
    assert calls[0].id != calls[1].id
    assert all(call.id.startswith("call_") and len(call.id) > 10 for call in calls)
    assert calls[0].arguments == '{"city": "Paris"}'


def test_a_call_is_released_in_the_step_that_closes_it() -> None:
    parser = make_output_parser(
        chat_template=HERMES_TEMPLATE, model_type=None, tools_enabled=True, thinking=None
    )
    assert parser.feed("Hi. " + H[:-3]).tool_calls == []
    delta = parser.feed(H[-3:])
    assert [call.name for call in delta.tool_calls] == ["get_weather"]


def test_plain_text_is_released_at_once() -> None:
    parser = make_output_parser(
        chat_template=HERMES_TEMPLATE, model_type=None, tools_enabled=True, thinking=None
    )
    assert parser.feed("The answer").content == "The answer"
    assert parser.feed(" is <").content == " is"  # `<` may open a tag; the space may precede it
    assert parser.feed("b>").content == " <b>"
    assert parser.finish().content == ""


@pytest.mark.parametrize(
    ("template", "model_type", "expected"),
    [
        (CODER_TEMPLATE, "qwen3_moe", "qwen3_coder"),
        (HERMES_TEMPLATE, "qwen2", "hermes"),
        (MISTRAL_TEMPLATE, None, "mistral"),
        (LLAMA_TEMPLATE, None, "llama3"),
        (None, "llama", "llama3"),
        (None, "mistral", "mistral"),
        ("{{ messages }}", "gpt2", "hermes"),
    ],
)
def test_format_detection(template: str | None, model_type: str | None, expected: str) -> None:
    from omlx.engine.text.parsers import detect_tool_format

    assert detect_tool_format(template, model_type).name == expected

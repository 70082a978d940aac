"""Output grammars (omlx.engine.constraints) walked token by token with a real tokenizer.

Each case tokenizes a text with the tiny models' GPT-2 tokenizer (ChatML and tool-call
tokens added), feeds it through a fresh matcher and checks every token was allowed and
the end-of-turn token is allowed at the end; the family's own output parser must read
the forced tool calls back.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from tokenizers import Tokenizer

from omlx.engine.api import GenerationRequest, RequestId, ResponseFormat
from omlx.engine.constraints import (
    GrammarCompiler,
    forced_tools,
    is_constrained,
    request_grammar,
)
from omlx.engine.text.parsers import TOOL_FORMATS
from omlx.engine.text.parsers.tool_stream import ToolCallExtractor
from omlx.errors import InvalidRequest
from tests.fixtures.tiny_tokenizer import EOS_TOKEN, _built_files, tokenizer_size, tokenizer_vocab

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@functools.cache
def _compiler() -> GrammarCompiler:
    text = (_built_files() / "tokenizer.json").read_text()
    return GrammarCompiler(text, tokenizer_size() + 7, [tokenizer_vocab()[EOS_TOKEN]])


@functools.cache
def _tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(_built_files() / "tokenizer.json"))


def _req(**kw: Any) -> GenerationRequest:
    return GenerationRequest(request_id=RequestId("r"), model="m", prompt="x", **kw)


def _accepts(request: GenerationRequest, text: str, tool_format: str = "hermes") -> bool:
    """The grammar takes the text's tokens, and then the end-of-turn token, in the mask."""
    compiler = _compiler()
    grammar = request_grammar(request, tool_format, compiler.special_id)
    assert grammar is not None
    row = compiler.compile(grammar).matcher()
    ids = _tokenizer().encode(text, add_special_tokens=False).ids
    # The first token goes through the mask too; later ones through the matcher, whose
    # masks may refuse a token that spans two lexemes (`"}`) where the pieces are allowed.
    row.fill()
    if not row.allows(ids[0]):
        return False
    row.consume(ids)
    if row.error is not None:
        return False
    row.fill()
    return row.allows(tokenizer_vocab()[EOS_TOKEN])


def _json(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False)  # ", " and ": ", as the grammar lays it out


@pytest.mark.parametrize(
    ("doc", "ok"),
    [
        ({"name": "Ann", "age": 30, "pets": ["cat"]}, True),
        ({"name": "Ann", "age": 30}, True),
        ({"name": "Ann"}, False),  # required
        ({"name": "Ann", "age": 121}, False),  # maximum
        ({"name": "Annabelle!", "age": 3}, False),  # maxLength
        ({"name": "A", "age": 1, "pets": ["cow"]}, False),  # enum
        ({"name": "A", "age": 1, "pets": ["cat", "dog", "cat"]}, False),  # maxItems
        ({"name": "A", "age": 1, "x": 1}, False),  # additionalProperties
    ],
)
def test_json_schema_is_enforced(doc: Any, ok: bool) -> None:
    req = _req(response_format=ResponseFormat("json_schema", PERSON))
    assert _accepts(req, _json(doc)) is ok


def test_json_object_is_any_object_with_fixed_separators() -> None:
    req = _req(response_format=ResponseFormat("json_object"))
    assert _accepts(req, _json({"a": [1, {"b": None}], "c": "d"}))
    assert not _accepts(req, "[1, 2]")
    assert not _accepts(req, '{"a":1}')  # no free layout: a sampled model cannot pad forever


def _call_text(fmt: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    if fmt == "hermes":
        return "\n".join(
            f"<tool_call>\n{_json({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls
        )
    if fmt == "llama3":
        return "; ".join(_json({"name": n, "parameters": a}) for n, a in calls)
    if fmt == "mistral":
        return "[TOOL_CALLS]" + _json([{"name": n, "arguments": a} for n, a in calls])
    assert fmt == "qwen3_coder"
    out = []
    for name, args in calls:
        params = "".join(f"<parameter={k}>\n{_json(v)}\n</parameter>\n" for k, v in args.items())
        out.append(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")
    return "\n".join(out)


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral", "qwen3_coder"])
def test_forced_calls_in_each_family_format_parse_back(fmt: str) -> None:
    req = _req(tools=[WEATHER, TIME], tool_choice="required")
    calls = [("get_weather", {"city": "Oslo", "unit": "c"}), ("get_time", {})]
    text = _call_text(fmt, calls)
    assert _accepts(req, text, fmt)
    extractor = ToolCallExtractor(TOOL_FORMATS[fmt])
    content, parsed = extractor.feed(text)
    rest, more = extractor.finish()
    assert (content + rest).strip() == ""
    assert [(c.name, json.loads(c.arguments)) for c in parsed + more] == calls


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral", "qwen3_coder"])
def test_forced_call_arguments_must_match_the_schema(fmt: str) -> None:
    req = _req(tools=[WEATHER], tool_choice="required")
    assert not _accepts(req, _call_text(fmt, [("get_weather", {"city": "Oslo", "unit": "k"})]), fmt)
    assert not _accepts(req, _call_text(fmt, [("get_weather", {"unit": "c"})]), fmt)
    assert not _accepts(req, _call_text(fmt, [("get_wether", {"city": "Oslo"})]), fmt)
    assert not _accepts(req, "It is sunny.", fmt)


def test_named_choice_and_parallel_switch() -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    two = _call_text("hermes", [("get_time", {}), ("get_time", {})])
    assert _accepts(_req(tools=[WEATHER, TIME], tool_choice=named), two)
    assert not _accepts(
        _req(tools=[WEATHER, TIME], tool_choice=named),
        _call_text("hermes", [("get_weather", {"city": "x"})]),
    )
    single = _req(tools=[WEATHER, TIME], tool_choice=named, parallel_tool_calls=False)
    assert _accepts(single, _call_text("hermes", [("get_time", {})]))
    assert not _accepts(single, two)


def test_forced_tool_wins_over_response_format_and_auto_stays_free() -> None:
    both = _req(tools=[TIME], tool_choice="required", response_format=ResponseFormat("json_object"))
    assert _accepts(both, _call_text("hermes", [("get_time", {})]))
    assert not _accepts(both, "{}")
    for choice in (None, "auto", "none"):
        req = _req(tools=[TIME], tool_choice=choice)
        assert not is_constrained(req)
        assert request_grammar(req, "hermes", _compiler().special_id) is None
    assert forced_tools(_req(tools=[TIME], tool_choice="required")) == [TIME]


def test_unknown_forced_function_is_a_400() -> None:
    with pytest.raises(InvalidRequest, match="unknown function 'nope'") as e:
        forced_tools(
            _req(tools=[TIME], tool_choice={"type": "function", "function": {"name": "nope"}})
        )
    assert e.value.param == "tool_choice"


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"type": "array", "uniqueItems": True}, "uniqueItems"),
        ({"type": "strin"}, "strin"),
        ({"type": "string", "pattern": "(a"}, "unclosed group"),
        ({"$ref": "#/$defs/missing"}, "missing"),
    ],
)
def test_a_schema_that_cannot_be_enforced_is_a_400_saying_why(schema: Any, says: str) -> None:
    compiler = _compiler()
    grammar = request_grammar(
        _req(response_format=ResponseFormat("json_schema", schema)), "hermes", compiler.special_id
    )
    assert grammar is not None
    with pytest.raises(InvalidRequest, match=says) as e:
        compiler.compile(grammar)
    assert e.value.param == "response_format"


def test_a_tool_schema_that_cannot_be_enforced_names_the_tools() -> None:
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "objet"}}}
    compiler = _compiler()
    grammar = request_grammar(
        _req(tools=[bad], tool_choice="required"), "hermes", compiler.special_id
    )
    assert grammar is not None
    with pytest.raises(InvalidRequest, match="tool's parameters schema") as e:
        compiler.compile(grammar)
    assert e.value.param == "tools"


def test_special_marker_tokens_are_matched_as_tokens() -> None:
    compiler = _compiler()
    vocab = tokenizer_vocab()
    assert compiler.special_id("<|im_start|>") == vocab["<|im_start|>"]
    # An added token is forced as that token, the way the model writes it.
    assert compiler.special_id("<tool_call>") == vocab["<tool_call>"]
    assert compiler.special_id("hello") is None

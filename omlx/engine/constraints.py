"""Constrained decoding policy: the grammar a request's output must follow (no MLX).

Grammars are llguidance Lark text with `%json {schema}` islands, compiled against the
model's tokenizer. llguidance was picked on measured numbers (benchmarks/grammar_engines.py):
every JSON Schema feature check passed on SmolLM2's and Gemma-3's vocabularies, a row's
mask costs tens of microseconds, and it installs as one wheel with no dependencies
(xgrammar needs PyTorch: gigabytes of CUDA wheels on Linux x86-64).

JSON is laid out with fixed separators (", " and ": ", what chat templates' `tojson`
writes) and no free whitespace, so a sampled model cannot pad its answer forever.
Forced tool calls are written in the model family's own tool-call markup, so the output
parsers that read unforced calls read these too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from omlx.engine.api import GenerationRequest, ResponseFormat
from omlx.errors import InvalidRequest

JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
ANY_OBJECT: dict[str, Any] = {"type": "object"}
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}

# A special token's id for marker text like "<|python_tag|>", or None when it is plain text.
SpecialId = Callable[[str], int | None]


@dataclass(frozen=True, slots=True)
class Grammar:
    """A request's output grammar (llguidance Lark) and what it is for, for error messages."""

    lark: str
    purpose: str  # "response_format" | "tool_choice"


# -- what a request needs ---------------------------------------------------------------


def forced_tools(request: GenerationRequest) -> list[dict[str, Any]] | None:
    """The tools one of which must be called, or None when calls are not forced."""
    tools, choice = request.tools, request.tool_choice
    if not tools or choice in (None, "auto", "none"):
        return None
    if choice == "required":
        return list(tools)
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if not name:
        raise InvalidRequest(f"unsupported tool_choice {choice!r}", param="tool_choice")
    chosen = [t for t in tools if _function(t).get("name") == name]
    if not chosen:
        raise InvalidRequest(f"tool_choice names unknown function {name!r}", param="tool_choice")
    return chosen


def is_constrained(request: GenerationRequest) -> bool:
    fmt = request.response_format
    return (fmt is not None and fmt.is_constrained) or forced_tools(request) is not None


def request_grammar(
    request: GenerationRequest, tool_format: str, special_id: SpecialId
) -> Grammar | None:
    """The grammar of the request's output, or None when it is free text.

    A forced tool call wins over response_format: the answer then is the call.
    """
    tools = forced_tools(request)
    if tools is not None:
        body = tool_calls_rule(tools, tool_format, special_id, request.parallel_tool_calls)
        return Grammar(f"start: {body}\n", "tool_choice")
    fmt = request.response_format
    if fmt is None or not fmt.is_constrained:
        return None
    return Grammar(f"start: {json_rule(response_schema(fmt))}\n", "response_format")


def response_schema(fmt: ResponseFormat) -> dict[str, Any]:
    if fmt.type == "json_object":
        return ANY_OBJECT
    if fmt.type == "json_schema":
        if not isinstance(fmt.json_schema, dict):
            raise InvalidRequest(
                "response_format json_schema needs a schema object",
                param="response_format.json_schema.schema",
            )
        return fmt.json_schema
    raise InvalidRequest(f"unsupported response_format type {fmt.type!r}", param="response_format")


# -- Lark building ----------------------------------------------------------------------


def json_rule(schema: dict[str, Any]) -> str:
    """A Lark `%json` island for schema, laid out with JSON_LAYOUT."""
    guidance = {**JSON_LAYOUT, **(schema.get("x-guidance") or {})}
    return "%json " + json.dumps({**schema, "x-guidance": guidance}, ensure_ascii=False)


def _lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _marker(text: str, special_id: SpecialId) -> str:
    """A marker as the model writes it: its special token if it has one, else the text."""
    token = special_id(text)
    return f"<[{token}]>" if token is not None else _lit(text)


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    return tool.get("function") or tool


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    params = _function(tool).get("parameters")
    return params if isinstance(params, dict) and params else EMPTY_PARAMETERS


def _call_object(tool: dict[str, Any], arguments_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "name": {"const": _function(tool)["name"]},
            arguments_key: _parameters(tool),
        },
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }


def _one_of(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def tool_calls_rule(
    tools: list[dict[str, Any]], tool_format: str, special_id: SpecialId, parallel: bool
) -> str:
    """One call (or, with parallel, one or more) in the model family's tool-call markup."""
    if tool_format == "llama3":
        call = json_rule(_one_of([_call_object(t, "parameters") for t in tools]))
        return f'{call} ("; " {call})*' if parallel else call
    if tool_format == "mistral":
        obj = _one_of([_call_object(t, "arguments") for t in tools])
        array = {"type": "array", "items": obj, "minItems": 1}
        if not parallel:
            array["maxItems"] = 1
        return f"{_marker('[TOOL_CALLS]', special_id)} {json_rule(array)}"
    if tool_format == "qwen3_coder":
        call = "(" + " | ".join(_xml_call(t, special_id) for t in tools) + ")"
    else:  # hermes, and the generic convention of templates without tools
        obj = json_rule(_one_of([_call_object(t, "arguments") for t in tools]))
        call = f'{_marker("<tool_call>", special_id)} "\\n" {obj} "\\n" ' + _marker(
            "</tool_call>", special_id
        )
    return f'{call} ("\\n" {call})*' if parallel else call


def _xml_call(tool: dict[str, Any], special_id: SpecialId) -> str:
    """Qwen3-Coder: `<function=NAME>` with one `<parameter=P>` per argument, values as JSON."""
    params = _parameters(tool)
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])
    parts = []
    for key, schema in props.items():
        piece = f'"<parameter={key}>\\n" {json_rule(schema or {})} "\\n</parameter>\\n"'
        parts.append(piece if key in required else f"({piece})?")
    name = _function(tool)["name"]
    return (
        f'{_marker("<tool_call>", special_id)} "\\n<function={name}>\\n" '
        + " ".join(parts)
        + f' "</function>\\n" {_marker("</tool_call>", special_id)}'
    )


# -- compiling and matching (llguidance) ------------------------------------------------


class GrammarCompiler:
    """llguidance for one model's tokenizer; built once per model (about 1 s for 262k tokens)."""

    def __init__(self, tokenizer_json: str, vocab_size: int, eos_ids: list[int]) -> None:
        import llguidance

        self._ll = llguidance
        self.vocab_size = vocab_size
        # Every end-of-turn token ends a finished structure (and nothing else does).
        self.tokenizer = llguidance.LLTokenizer(
            tokenizer_json, n_vocab=vocab_size, eos_token=sorted(eos_ids)
        )

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, vocab_size: int, eos_ids: list[int]) -> GrammarCompiler:
        """From an HF fast tokenizer, or mlx-lm's wrapper (it forwards attributes to one)."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise InvalidRequest("structured output needs a fast (tokenizer.json) tokenizer")
        backend = copy.copy(backend)  # as llguidance.hf does: no padding or truncation
        backend.no_padding()
        backend.no_truncation()
        return cls(backend.to_str(), vocab_size, eos_ids)

    def new_matcher(self, grammar_text: str) -> Any:
        return self._ll.LLMatcher(self.tokenizer, grammar_text)

    def special_id(self, text: str) -> int | None:
        ids = self.tokenizer.tokenize_str(text)
        if len(ids) == 1 and self.tokenizer.is_special_token(ids[0]):
            return ids[0]
        return None

    def compile(self, grammar: Grammar) -> CompiledGrammar:
        """Validates the grammar against the tokenizer; InvalidRequest says what is wrong."""
        try:
            text = self._ll.LLMatcher.grammar_from_lark(grammar.lark)
            is_error, messages = self._ll.LLMatcher.validate_grammar_with_warnings(
                text, self.tokenizer
            )
        except Exception as e:  # llguidance raises ValueError for schema errors
            is_error, messages = True, [str(e)]
        if is_error:
            detail = "; ".join(m.strip() for m in messages)[:500]
            if grammar.purpose == "tool_choice":
                what, param = "a tool's parameters schema", "tools"
            else:
                what, param = "the response_format JSON schema", "response_format"
            raise InvalidRequest(f"{what} cannot be enforced: {detail}", param=param)
        return CompiledGrammar(text, self)


@dataclass(frozen=True, slots=True)
class CompiledGrammar:
    text: str
    compiler: GrammarCompiler

    def matcher(self) -> RowMatcher:
        return RowMatcher(self.compiler.new_matcher(self.text), self.compiler)


class RowMatcher:
    """One constrained row: advanced with each generated token, fills its token bitmask."""

    def __init__(self, matcher: Any, compiler: GrammarCompiler) -> None:
        self._m = matcher
        self.num_consumed = 0
        self.eos_id: int = compiler.tokenizer.eos_token
        self.words = np.zeros(((compiler.vocab_size + 31) // 32,), dtype=np.int32)

    def consume(self, tokens: list[int]) -> None:
        self.num_consumed += len(tokens)
        if not self._m.is_error():
            self._m.consume_tokens(tokens)

    def fill(self) -> np.ndarray:
        """The int32 bitmask of allowed next tokens (bit t of word t // 32 = token t)."""
        if self._m.is_error():  # cannot happen with masked sampling; end the row cleanly
            self.words[:] = 0
            self.words.view(np.uint32)[self.eos_id >> 5] = np.uint32(1 << (self.eos_id & 31))
            return self.words
        self._m.unsafe_compute_mask_ptr(self.words.ctypes.data, self.words.nbytes)
        return self.words

    def keep(self, vocab: int) -> np.ndarray:
        """The tokens allowed next, one bool per logit (what DFlash's verify masks with)."""
        return allowed_ids(self.fill(), vocab)

    def rollback(self, num_tokens: int) -> None:
        """Take back the last `num_tokens` consumed (a draft walked, then not committed)."""
        if num_tokens:
            self._m.rollback(num_tokens)
            self.num_consumed -= num_tokens

    @property
    def is_accepting(self) -> bool:
        return self._m.is_accepting()

    @property
    def error(self) -> str | None:
        return self._m.get_error() if self._m.is_error() else None

    def allows(self, token: int) -> bool:
        return bool((int(self.words[token >> 5]) >> (token & 31)) & 1)


def allowed_ids(words: np.ndarray, vocab_size: int) -> np.ndarray:
    """The bitmask as one bool per token."""
    return np.unpackbits(words.view(np.uint8), count=vocab_size, bitorder="little").view(bool)

"""Tools for templates that ignore them, and the template switches of constrained requests."""

from __future__ import annotations

import json
from typing import Any

import jinja2
import pytest

from omlx.engine.api import ChatMessage, GenerationRequest, RequestId, ResponseFormat
from omlx.engine.text.parsers import make_output_parser
from omlx.engine.text.templating import ModelSpec, prepare_prompt
from omlx.engine.text.tool_prompt import inline_tools, template_renders_tools
from omlx.errors import InvalidRequest
from tests.fixtures.tiny_tokenizer import CHAT_TEMPLATE_PATH

# SmolLM2-135M-Instruct's template (from its GGUF): role and content only.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


class JinjaTokenizer:
    """Renders a chat template with jinja2 as HF does; one id per character."""

    def __init__(self, template: str) -> None:
        self.chat_template = template
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda v: json.dumps(v, ensure_ascii=False)
        self._template = env.from_string(template)

    def apply_chat_template(self, messages: list[dict[str, Any]], **kw: Any) -> str:
        assert kw.pop("tokenize") is False
        return self._template.render(messages=messages, **kw)

    def encode(self, text: str, **kw: Any) -> list[int]:
        return [ord(c) for c in text]


class RaisingTokenizer(JinjaTokenizer):
    def apply_chat_template(self, messages: list[dict[str, Any]], **kw: Any) -> str:
        if kw.get("tools"):
            raise ValueError("no tools here")
        return super().apply_chat_template(messages, **kw)


def test_probe_tells_templates_with_and_without_tools() -> None:
    assert template_renders_tools(JinjaTokenizer(CHAT_TEMPLATE_PATH.read_text()))
    assert not template_renders_tools(JinjaTokenizer(SMOLLM2_TEMPLATE))
    assert not template_renders_tools(RaisingTokenizer(SMOLLM2_TEMPLATE))


def _chat(*messages: ChatMessage, **kw: Any) -> GenerationRequest:
    return GenerationRequest(
        request_id=RequestId("r"), model="m", messages=list(messages), max_tokens=8, **kw
    )


SPEC = ModelSpec("m", context_length=4096)


def test_tools_reach_the_prompt_when_the_template_drops_them() -> None:
    tok = JinjaTokenizer(SMOLLM2_TEMPLATE)
    plain = prepare_prompt(_chat(ChatMessage("user", "hi")), tok, SPEC, default_max_tokens=8)
    with_tools = prepare_prompt(
        _chat(ChatMessage("user", "hi"), tools=[TOOL]), tok, SPEC, default_max_tokens=8
    )
    assert with_tools.tools_enabled
    assert len(with_tools.token_ids) > len(plain.token_ids) + 50
    assert with_tools.text is not None
    assert '"name": "get_weather"' in with_tools.text and "<tool_call>" in with_tools.text
    assert with_tools.text.startswith("<|im_start|>system\n# Tools")
    # The prompt taught Hermes markup: the parser and the grammar follow it, whatever the
    # model family (SmolLM2 is a llama, whose own format is Llama-3's bare JSON).
    assert with_tools.tool_format == "hermes" and plain.tool_format is None
    parser = make_output_parser(
        chat_template=SMOLLM2_TEMPLATE,
        model_type="llama",
        tools_enabled=True,
        thinking=None,
        tool_format=with_tools.tool_format,
    )
    d = parser.feed(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    assert [(c.name, c.arguments) for c in d.tool_calls] == [("get_weather", '{"city": "Oslo"}')]


def test_templates_with_tools_render_them_themselves() -> None:
    tok = JinjaTokenizer(CHAT_TEMPLATE_PATH.read_text())
    p = prepare_prompt(
        _chat(ChatMessage("user", "hi"), tools=[TOOL]), tok, SPEC, default_max_tokens=8
    )
    assert p.text is not None and p.text.count("get_weather") == 1
    assert p.tool_format is None  # the family's own format


def test_history_calls_and_results_are_written_in_the_hermes_format() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        {"role": "tool", "content": "warm", "tool_call_id": "c2"},
    ]
    out = inline_tools(messages, [TOOL])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.\n\n# Tools")
    assert out[2]["content"] == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    assert out[3]["content"] == (
        "<tool_response>\nsunny\n</tool_response>\n<tool_response>\nwarm\n</tool_response>"
    )
    assert all(set(m) == {"role", "content"} for m in out)


def test_constrained_requests_render_without_thinking() -> None:
    tok = JinjaTokenizer(CHAT_TEMPLATE_PATH.read_text())
    json_mode = ResponseFormat("json_object")
    p = prepare_prompt(
        _chat(ChatMessage("user", "hi"), response_format=json_mode), tok, SPEC, default_max_tokens=8
    )
    assert p.thinking is False and p.text is not None and p.text.endswith("</think>\n\n")
    with pytest.raises(InvalidRequest, match="thinking cannot be combined"):
        prepare_prompt(
            _chat(
                ChatMessage("user", "hi"),
                response_format=json_mode,
                chat_template_kwargs={"enable_thinking": True},
            ),
            tok,
            SPEC,
            default_max_tokens=8,
        )

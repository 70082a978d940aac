"""Message normalisation, tool_choice, context fitting and request validation (no MLX)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from omlx.engine.api import ChatMessage, GenerationRequest, RequestId, SamplingParams
from omlx.engine.text.templating import (
    ModelSpec,
    apply_tool_choice,
    context_length,
    fit_max_tokens,
    fold_late_system,
    normalize_messages,
    prepare_prompt,
)
from omlx.engine.text.validation import validate_request
from omlx.errors import ContextTooLong, InvalidRequest

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("a", "b")]


def test_multipart_text_is_joined_and_developer_is_system():
    msgs = normalize_messages(
        [
            ChatMessage("developer", "be brief"),
            ChatMessage("user", [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]),
        ]
    )
    assert msgs == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "one\ntwo"},
    ]


def test_images_rejected_for_text_models():
    with pytest.raises(InvalidRequest, match="not a vision-language model"):
        normalize_messages([ChatMessage("user", [{"type": "image_url", "image_url": {}}])])


def test_bad_role_names_the_field():
    with pytest.raises(InvalidRequest) as e:
        normalize_messages([ChatMessage("wizard", "hi")])
    assert e.value.param == "messages[0].role"


def test_assistant_tool_call_arguments_become_dicts():
    call = {"id": "c1", "type": "function", "function": {"name": "a", "arguments": '{"x": 1}'}}
    [msg] = normalize_messages([ChatMessage("assistant", None, tool_calls=[call])])
    assert msg["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert msg["content"] == ""


@pytest.mark.parametrize(
    ("choice", "num_tools", "note"),
    [
        (None, 2, None),
        ("auto", 2, None),
        ("none", 0, None),
        ("required", 2, "must call one"),
        ({"type": "function", "function": {"name": "b"}}, 1, "`b`"),
    ],
)
def test_tool_choice(choice, num_tools, note):
    tools, msgs = apply_tool_choice(TOOLS, choice, [{"role": "user", "content": "hi"}])
    assert len(tools or []) == num_tools
    if note:
        assert msgs[0]["role"] == "system" and note in msgs[0]["content"]
    else:
        assert msgs == [{"role": "user", "content": "hi"}]


def test_tool_choice_unknown_function():
    with pytest.raises(InvalidRequest):
        apply_tool_choice(TOOLS, {"type": "function", "function": {"name": "zz"}}, [])


def test_context_length_from_config():
    assert context_length({"max_position_embeddings": 8192}) == 8192
    assert context_length({"text_config": {"max_position_embeddings": 32}, "n_ctx": 9}) == 32
    assert context_length({}) is None


def test_fit_max_tokens_rules():
    spec = ModelSpec("m", context_length=100)
    assert fit_max_tokens(90, None, spec, 2048) == 10  # unset: clamped
    assert fit_max_tokens(90, 10, spec, 2048) == 10
    assert fit_max_tokens(90, 64000, spec, 2048) == 10  # clamped to the room left
    assert fit_max_tokens(90, 10, spec, 2048, strict=True) == 10
    with pytest.raises(ContextTooLong, match=r"100 tokens.*\b101\b"):
        fit_max_tokens(90, 11, spec, 2048, strict=True)
    with pytest.raises(ContextTooLong, match=r"100 tokens.*\b100 tokens"):
        fit_max_tokens(100, None, spec, 2048)


class FakeTokenizer:
    chat_template = "x"

    def apply_chat_template(self, messages, **kw):
        assert kw["tokenize"] is False
        end = "<|assistant|><think>\n" if kw.get("enable_thinking") else "<|assistant|>"
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + end

    def encode(self, text, **kw):
        return [ord(c) for c in text]


def _req(**kw):
    return GenerationRequest(request_id=RequestId("r"), model="m", **kw)


def test_prepare_prompt_reports_thinking_and_tools():
    req = _req(
        messages=[ChatMessage("user", "hi")],
        tools=TOOLS,
        chat_template_kwargs={"enable_thinking": True},
    )
    p = prepare_prompt(
        req, FakeTokenizer(), ModelSpec("m", context_length=1000), default_max_tokens=50
    )
    assert p.tools_enabled and p.thinking is True and p.prompt_ends_in_think
    assert p.max_tokens == 50
    assert len(p.token_ids) == len(p.text)


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"sampling": SamplingParams(temperature=-1)}, "temperature"),
        ({"sampling": SamplingParams(top_p=0)}, "top_p"),
        ({"sampling": SamplingParams(top_logprobs=50)}, "top_logprobs"),
        ({"sampling": SamplingParams(logit_bias={999: 1.0})}, "logit_bias"),
        ({"sampling": SamplingParams(logit_bias={1: 500.0})}, "logit_bias"),
    ],
)
def test_validation_names_the_field(kw, param):
    with pytest.raises(InvalidRequest) as e:
        validate_request(_req(prompt="x", **kw), vocab_size=100)
    assert e.value.param == param


def test_prompt_token_ids_outside_vocab():
    with pytest.raises(InvalidRequest, match="outside the vocabulary"):
        validate_request(_req(prompt_token_ids=[5, 100]), vocab_size=100)


def test_pure_modules_import_without_mlx():
    code = (
        "import sys; sys.modules['mlx'] = None; sys.modules['mlx_lm'] = None\n"
        "import omlx.engine.text.templating, omlx.engine.text.validation, omlx.engine.scheduling\n"
        "import omlx.engine.text.stop_strings, omlx.engine.text.detokenize, omlx.engine.metrics\n"
        "import omlx.engine.text.parsers, omlx.engine.prefix, omlx.engine.outbox\n"
        "import omlx.engine.text.thinking\n"
        "import omlx.engine.engine, omlx.pool.pool\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


FOLD_CASES = [
    # (roles and contents in, roles and contents out)
    (
        [("system", "S"), ("user", "u1"), ("assistant", "a1"), ("system", "late"), ("user", "u2")],
        [("system", "S"), ("user", "u1"), ("assistant", "a1"), ("user", "late\n\nu2")],
    ),
    (
        [("user", "u1"), ("system", "late")],
        [("user", "u1\n\nlate")],
    ),
    (
        [("system", "S"), ("assistant", "a"), ("system", "late")],
        [("system", "S"), ("assistant", "a"), ("user", "late")],
    ),
    ([("system", "S1"), ("system", "S2"), ("user", "u")], None),  # leading ones stay
]


@pytest.mark.parametrize(("given", "expected"), FOLD_CASES)
def test_fold_late_system(given, expected):
    messages = [{"role": r, "content": c} for r, c in given]
    folded = fold_late_system(messages)
    assert [(m["role"], m["content"]) for m in folded] == (expected or given)


class FirstSystemOnlyTokenizer(FakeTokenizer):
    """Refuses a system message that is not first, as Qwen's templates do."""

    def apply_chat_template(self, messages, **kw):
        if any(m["role"] == "system" for m in messages[1:]):
            raise ValueError("System message must be at the beginning.")
        return super().apply_chat_template(messages, **kw)


def test_a_late_system_message_is_folded_when_the_template_refuses_it():
    req = _req(
        messages=[
            ChatMessage("system", "S"),
            ChatMessage("user", "hi"),
            ChatMessage("assistant", "yo"),
            ChatMessage("system", "reminder"),
            ChatMessage("user", "go"),
        ]
    )
    spec = ModelSpec("m", context_length=1000)
    text = prepare_prompt(req, FirstSystemOnlyTokenizer(), spec, default_max_tokens=5).text
    assert text == "<system>S<user>hi<assistant>yo<user>reminder\n\ngo<|assistant|>"
    as_is = prepare_prompt(req, FakeTokenizer(), spec, default_max_tokens=5).text
    assert "<system>reminder" in as_is  # a template that allows it renders it as system

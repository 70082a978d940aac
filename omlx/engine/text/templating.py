"""Chat templating and prompt preparation (pure Python; the tokenizer is duck-typed).

Message normalisation, tool_choice and the context check are pure. The tokenizer's
`apply_chat_template`/`encode` run on the engine's tokenizer worker, never on the loop.

Context rule: the prompt must leave room for at least one generated token. A `max_tokens`
larger than what is left of the context is clamped to it (agents ask for 32k-64k whatever
the model), or rejected as OpenAI does with `engine.strict_max_tokens`.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from omlx.engine.api import ChatMessage, GenerationRequest
from omlx.engine.constraints import is_constrained
from omlx.engine.text.tool_prompt import (
    INLINE_TOOL_FORMAT,
    inline_tools,
    template_renders_tools,
)
from omlx.errors import ContextTooLong, InvalidRequest

ROLES = {"system", "developer", "user", "assistant", "tool"}
IMAGE_PARTS = {"image_url", "input_image", "image"}
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_ctx",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "n_positions",
)


class ChatTokenizer(Protocol):
    chat_template: Any

    def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any: ...

    def encode(self, text: str, **kwargs: Any) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What templating and admission need to know about a loaded model."""

    name: str
    model_type: str | None = None
    context_length: int | None = None
    vocab_size: int | None = None
    chat_template: str | None = None
    is_vlm: bool = False


@dataclass(frozen=True, slots=True)
class PreparedPrompt:
    token_ids: list[int]
    max_tokens: int
    text: str | None = None  # the rendered chat prompt or the completion prompt
    tools_enabled: bool = False
    thinking: bool | None = None
    prompt_ends_in_think: bool = False
    # The tool-call format the prompt taught, when omlx wrote the tools in itself (the
    # template ignores them); None: the model family's own (parsers.detect_tool_format).
    tool_format: str | None = None


def context_length(config: dict[str, Any]) -> int | None:
    """The model's context window from its config.json (text_config first, for VLMs)."""
    for section in (config.get("text_config") or {}, config):
        for key in CONTEXT_KEYS:
            value = section.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None


def normalize_messages(
    messages: list[ChatMessage], *, allow_images: bool = False
) -> list[dict[str, Any]]:
    """ChatMessages → the dicts HF chat templates expect; bad input → InvalidRequest."""
    out = []
    for i, m in enumerate(messages):
        if m.role not in ROLES:
            raise InvalidRequest(
                f"messages[{i}].role must be one of {sorted(ROLES)}, got {m.role!r}",
                param=f"messages[{i}].role",
            )
        d: dict[str, Any] = {
            "role": "system" if m.role == "developer" else m.role,
            "content": _content_text(m.content, i, allow_images),
        }
        if m.name:
            d["name"] = m.name
        if m.tool_calls:
            d["tool_calls"] = [_template_tool_call(c) for c in m.tool_calls]
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        if m.reasoning_content:
            d["reasoning_content"] = m.reasoning_content
        out.append(d)
    return out


def _content_text(content: Any, index: int, allow_images: bool) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind in IMAGE_PARTS and not allow_images:
            raise InvalidRequest(
                "this model does not accept images (it is not a vision-language model)",
                param=f"messages[{index}].content[{j}]",
            )
        else:
            raise InvalidRequest(
                f"unsupported content part type {kind!r}",
                param=f"messages[{index}].content[{j}]",
            )
    return "\n".join(texts)


def _template_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    # Templates (Qwen, Llama 3) render arguments with `tojson`: give them a dict.
    fn = dict(call.get("function") or {})
    args = fn.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(json.JSONDecodeError):
            fn["arguments"] = json.loads(args)
    return {**call, "function": fn}


def apply_tool_choice(
    tools: list[dict[str, Any]] | None, tool_choice: Any, messages: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """ "none" drops the tools; "required" or a named function adds a system instruction."""
    if not tools or tool_choice in (None, "auto"):
        return tools or None, messages
    if tool_choice == "none":
        return None, messages
    if tool_choice == "required":
        note = "You must call one of the available tools in your reply."
    elif isinstance(tool_choice, dict) and (tool_choice.get("function") or {}).get("name"):
        name = tool_choice["function"]["name"]
        tools = [t for t in tools if (t.get("function") or {}).get("name") == name]
        if not tools:
            raise InvalidRequest(
                f"tool_choice names unknown function {name!r}", param="tool_choice"
            )
        note = f"You must call the function `{name}` in your reply."
    else:
        raise InvalidRequest(f"unsupported tool_choice {tool_choice!r}", param="tool_choice")
    return tools, _add_system_note(messages, note)


def _add_system_note(messages: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{note}".strip()}
        return [first, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


def render_chat(
    request: GenerationRequest, tokenizer: ChatTokenizer, spec: ModelSpec
) -> tuple[str, list[int], bool]:
    """Renders messages with the model's own template; returns (text, ids, tools_enabled)."""
    assert request.messages is not None
    if getattr(tokenizer, "chat_template", None) is None and spec.chat_template is None:
        raise InvalidRequest(f"model {spec.name!r} has no chat template; use /v1/completions")
    messages = normalize_messages(request.messages, allow_images=spec.is_vlm)
    tools, messages = apply_tool_choice(request.tools, request.tool_choice, messages)
    kwargs = _template_kwargs(request)
    if tools and template_renders_tools(tokenizer):
        kwargs["tools"] = tools
    elif tools:
        messages = inline_tools(messages, tools)
    try:
        text = _apply(tokenizer, messages, request.add_generation_prompt, kwargs)
    except Exception as e:  # template errors are the request's fault (bad roles, order)
        folded = fold_late_system(messages)
        if folded == messages:
            raise InvalidRequest(f"the chat template rejected the messages: {e}") from None
        # Many templates allow a system message only first (Qwen) or roles that strictly
        # alternate (Gemma); clients such as Claude Code send system turns mid-conversation.
        try:
            text = _apply(tokenizer, folded, request.add_generation_prompt, kwargs)
        except Exception as e2:
            raise InvalidRequest(f"the chat template rejected the messages: {e2}") from None
    ids = tokenizer.encode(text, add_special_tokens=False)
    return text, ids, bool(tools)


def _apply(
    tokenizer: ChatTokenizer,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
    kwargs: dict[str, Any],
) -> str:
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
    )


def fold_late_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """System messages after the leading ones become part of a user turn: merged into the
    next user message (else the previous one), so user/assistant turns still alternate."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    out = messages[:lead]
    pending: list[str] = []
    for m in messages[lead:]:
        if m["role"] == "system":
            pending.append(str(m.get("content") or ""))
            continue
        if pending and m["role"] == "user":
            m = {**m, "content": "\n\n".join([*pending, str(m.get("content") or "")])}
            pending = []
        elif pending and out and out[-1]["role"] == "user":
            joined = "\n\n".join([str(out[-1].get("content") or ""), *pending])
            out[-1] = {**out[-1], "content": joined}
            pending = []
        out.append(m)
    if pending:
        if out and out[-1]["role"] == "user":
            joined = "\n\n".join([str(out[-1].get("content") or ""), *pending])
            out[-1] = {**out[-1], "content": joined}
        else:
            out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def _tools_inlined(request: GenerationRequest, tokenizer: ChatTokenizer) -> bool:
    if request.messages is None or not request.tools or request.tool_choice == "none":
        return False
    return not template_renders_tools(tokenizer)


def _template_kwargs(request: GenerationRequest) -> dict[str, Any]:
    """The request's template switches; constrained output starts at once, unthought."""
    kwargs: dict[str, Any] = dict(request.chat_template_kwargs)
    if is_constrained(request):
        if kwargs.get("enable_thinking"):
            raise InvalidRequest(
                "thinking cannot be combined with response_format or a forced tool_choice",
                param="thinking",
            )
        kwargs["enable_thinking"] = False
    return kwargs


def prepare_prompt(
    request: GenerationRequest,
    tokenizer: ChatTokenizer,
    spec: ModelSpec,
    *,
    default_max_tokens: int,
    strict_max_tokens: bool = False,
    max_output_tokens: int = 0,
) -> PreparedPrompt:
    """Token ids, the generation budget and the parser hints of one request."""
    text, tools_enabled = None, False
    if request.messages is not None:
        text, ids, tools_enabled = render_chat(request, tokenizer, spec)
    elif request.prompt is not None:
        text, ids = request.prompt, tokenizer.encode(request.prompt)
    else:
        ids = list(request.prompt_token_ids or [])
    if not ids:
        raise InvalidRequest("the prompt is empty", param="prompt")
    thinking = _template_kwargs(request).get("enable_thinking")
    return PreparedPrompt(
        token_ids=ids,
        max_tokens=fit_max_tokens(
            len(ids),
            request.max_tokens,
            spec,
            default_max_tokens,
            strict=strict_max_tokens,
            cap_tokens=max_output_tokens,
        ),
        text=text,
        tools_enabled=tools_enabled,
        thinking=None if thinking is None else bool(thinking),
        prompt_ends_in_think=bool(text) and text.rstrip().endswith("<think>"),
        tool_format=INLINE_TOOL_FORMAT if _tools_inlined(request, tokenizer) else None,
    )


def fit_max_tokens(
    num_prompt: int,
    requested: int | None,
    spec: ModelSpec,
    default_max_tokens: int,
    *,
    strict: bool = False,
    cap_tokens: int = 0,
) -> int:
    """The completion budget: what was asked for (default when unset), at most the room
    the prompt leaves in the context and `cap_tokens` (0: no cap); `strict` refuses an
    explicit ask that does not fit the context."""
    ctx = spec.context_length
    if ctx is None:
        budget = requested or default_max_tokens
        return min(budget, cap_tokens) if cap_tokens else budget
    if num_prompt >= ctx:
        raise ContextTooLong(
            f"This model's maximum context length is {ctx} tokens, but the prompt has "
            f"{num_prompt} tokens. Shorten the prompt.",
            param="messages",
        )
    room = ctx - num_prompt
    if cap_tokens:
        room = min(room, cap_tokens)
    if requested is None:
        return min(default_max_tokens, room)
    if requested > room and strict:
        raise ContextTooLong(
            f"This model's maximum context length is {ctx} tokens, but {num_prompt + requested}"
            f" tokens were requested ({num_prompt} in the prompt, {requested} for the "
            "completion). Shorten the prompt or lower max_tokens.",
            param="max_tokens",
        )
    return min(requested, room)

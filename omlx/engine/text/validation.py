"""Request checks that need no model (pure Python): bad values get InvalidRequest."""

from __future__ import annotations

import json

from omlx.engine.api import GenerationRequest
from omlx.errors import ContextTooLong, InvalidRequest

MAX_TOP_LOGPROBS = 20
MAX_STOP_STRINGS = 16
# Tokenizers average 3-5 bytes of text per token; a long run of spaces or repeated
# punctuation can make one token of 16+ bytes. Text longer than the window times this
# cannot fit, and is refused before templating and tokenizing (a 10 MB prompt took
# 15-18 s of both, and held up every other request, just to learn that).
MAX_BYTES_PER_TOKEN = 32


def prompt_text_bytes(request: GenerationRequest) -> int:
    """UTF-8 bytes of the request's text (messages, prompt, tools); images not counted."""
    total = len((request.prompt or "").encode())
    for message in request.messages or []:
        content = message.content
        if isinstance(content, str):
            total += len(content.encode())
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                total += len(text.encode()) if isinstance(text, str) else 0
        for call in message.tool_calls or []:
            total += len(json.dumps(call))
    if request.tools:
        total += len(json.dumps(request.tools))
    return total


def check_prompt_fits(request: GenerationRequest, context_length: int | None) -> None:
    """ContextTooLong for a prompt that cannot fit the window, judged without a tokenizer."""
    if not context_length:
        return
    if request.prompt_token_ids is not None and len(request.prompt_token_ids) >= context_length:
        raise ContextTooLong(
            f"the prompt has {len(request.prompt_token_ids)} tokens; the model's context "
            f"window is {context_length} tokens",
            param="prompt",
        )
    num_bytes = prompt_text_bytes(request)
    limit = context_length * MAX_BYTES_PER_TOKEN
    if num_bytes > limit:
        raise ContextTooLong(
            f"the prompt is {num_bytes} bytes of text; a {context_length}-token context "
            f"window holds at most about {limit} bytes",
            param="messages" if request.messages is not None else "prompt",
        )


def validate_request(request: GenerationRequest, *, vocab_size: int | None = None) -> None:
    """Raises InvalidRequest naming the first bad field."""
    inputs = [request.messages, request.prompt, request.prompt_token_ids]
    if sum(x is not None for x in inputs) != 1:
        raise InvalidRequest("exactly one of messages, prompt or prompt_token_ids must be set")
    if request.messages is not None and not request.messages:
        raise InvalidRequest("messages must not be empty", param="messages")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise InvalidRequest(
            f"max_tokens must be at least 1, got {request.max_tokens}", param="max_tokens"
        )
    if len(request.stop) > MAX_STOP_STRINGS:
        raise InvalidRequest(f"at most {MAX_STOP_STRINGS} stop strings", param="stop")
    _validate_sampling(request, vocab_size)
    if vocab_size is not None and request.prompt_token_ids is not None:
        bad = [t for t in request.prompt_token_ids if not 0 <= t < vocab_size]
        if bad:
            raise InvalidRequest(
                f"token id {bad[0]} is outside the vocabulary (0..{vocab_size - 1})",
                param="prompt",
            )


def _validate_sampling(request: GenerationRequest, vocab_size: int | None) -> None:
    s = request.sampling.with_defaults({})  # unset fields are checked once filled
    checks = [
        (s.temperature >= 0, "temperature", "must be >= 0"),
        (0 < s.top_p <= 1, "top_p", "must be in (0, 1]"),
        (s.top_k >= 0, "top_k", "must be >= 0"),
        (0 <= s.min_p <= 1, "min_p", "must be in [0, 1]"),
        (s.repetition_penalty > 0, "repetition_penalty", "must be > 0"),
        (-2 <= s.presence_penalty <= 2, "presence_penalty", "must be in [-2, 2]"),
        (-2 <= s.frequency_penalty <= 2, "frequency_penalty", "must be in [-2, 2]"),
        (
            0 <= s.top_logprobs <= MAX_TOP_LOGPROBS,
            "top_logprobs",
            f"must be in [0, {MAX_TOP_LOGPROBS}]",
        ),
    ]
    for ok, name, rule in checks:
        if not ok:
            raise InvalidRequest(f"{name} {rule}, got {getattr(s, name)}", param=name)
    for token, bias in s.logit_bias.items():
        if vocab_size is not None and not 0 <= int(token) < vocab_size:
            raise InvalidRequest(
                f"logit_bias token {token} is outside the vocabulary (0..{vocab_size - 1})",
                param="logit_bias",
            )
        if not -100 <= bias <= 100:
            raise InvalidRequest(
                f"logit_bias values must be in [-100, 100], got {bias}", param="logit_bias"
            )

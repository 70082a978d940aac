"""Request checks that need no model (pure Python): bad values get InvalidRequest."""

from __future__ import annotations

from omlx.engine.api import GenerationRequest
from omlx.errors import InvalidRequest

MAX_TOP_LOGPROBS = 20
MAX_STOP_STRINGS = 16


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

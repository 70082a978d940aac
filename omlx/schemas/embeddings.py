"""OpenAI /v1/embeddings wire types."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import Struct


class EmbeddingsRequest(Struct, kw_only=True):
    # A string, a list of strings, a token-id list or a list of token-id lists.
    input: Any
    model: str = ""
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    # Texts longer than the model reads are refused (400) unless this is true; then they
    # are cut and `usage.truncated_inputs` says how many.
    truncate: bool = False


class Embedding(Struct, kw_only=True):
    object: str = "embedding"
    embedding: list[float] | str  # base64 of little-endian float32 when asked
    index: int


class EmbeddingsUsage(Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int
    truncated_inputs: int = 0


class EmbeddingsResponse(Struct, kw_only=True):
    object: str = "list"
    data: list[Embedding] = msgspec.field(default_factory=list)
    model: str
    usage: EmbeddingsUsage

"""/v1/rerank wire types, shaped like Cohere's and Jina's rerank APIs."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct


class RerankBody(Struct, kw_only=True):
    query: str
    documents: list[Any]  # strings, or objects with a "text" field
    model: str = ""
    top_n: int | None = None
    return_documents: bool = True
    instruction: str | None = None  # omlx extension: the task for causal-LM rerankers


class RerankDocument(Struct, kw_only=True):
    text: str


class RerankItem(Struct, kw_only=True):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankUsage(Struct, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class RerankResponse(Struct, kw_only=True):
    id: str
    object: str = "rerank"
    model: str
    results: list[RerankItem] = msgspec.field(default_factory=list)
    usage: RerankUsage

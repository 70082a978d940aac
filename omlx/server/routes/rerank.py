"""POST /v1/rerank (and /rerank, /v2/rerank): Cohere/Jina-shaped document reranking."""

from __future__ import annotations

from typing import Any

from litestar import Request, post

from omlx.engine.api import RerankRequest
from omlx.errors import InvalidRequest
from omlx.schemas.rerank import (
    RerankBody,
    RerankDocument,
    RerankItem,
    RerankResponse,
    RerankUsage,
)
from omlx.server.generation import pool_of, settings_of
from omlx.server.json_body import read_json
from omlx.server.openai_requests import new_request_id
from omlx.server.openapi import documented

MAX_DOCUMENTS = 1000


def document_texts(documents: list[Any]) -> list[str]:
    texts: list[str] = []
    for i, d in enumerate(documents):
        text = d.get("text") if isinstance(d, dict) else d
        if not isinstance(text, str):
            raise InvalidRequest(
                "each document must be a string or an object with a text field",
                param=f"documents[{i}]",
            )
        texts.append(text)
    return texts


@post(
    ["/v1/rerank", "/rerank", "/v2/rerank"],
    status_code=200,
    opt={"dialect": "openai"},
    operation_class=documented(body=RerankBody, returns=RerankResponse, overload=True),
)
async def rerank(request: Request[Any, Any, Any]) -> RerankResponse:
    body = await read_json(request, RerankBody)
    texts = document_texts(body.documents)
    if not texts:
        raise InvalidRequest("documents must not be empty", param="documents")
    if len(texts) > MAX_DOCUMENTS:
        raise InvalidRequest(f"at most {MAX_DOCUMENTS} documents per request", param="documents")
    if body.top_n is not None and body.top_n < 1:
        raise InvalidRequest("top_n must be at least 1", param="top_n")
    model = body.model or settings_of(request).engine.default_model
    result = await pool_of(request).rerank(
        RerankRequest(model=model, query=body.query, documents=texts, instruction=body.instruction)
    )
    # Highest score first; ties keep input order (sorted is stable).
    order = sorted(range(len(texts)), key=lambda i: -result.scores[i])[: body.top_n]
    return RerankResponse(
        id=new_request_id("rerank"),
        model=result.model,
        results=[
            RerankItem(
                index=i,
                relevance_score=result.scores[i],
                document=RerankDocument(text=texts[i]) if body.return_documents else None,
            )
            for i in order
        ],
        usage=RerankUsage(prompt_tokens=result.prompt_tokens, total_tokens=result.prompt_tokens),
    )


ROUTES = [rerank]

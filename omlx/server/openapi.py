"""The published OpenAPI schema (/openapi.json) and an offline docs page (/docs).

Routes read their JSON bodies themselves (json_body.py: media type, size, depth, then
msgspec), so Litestar cannot see the body types; each route names them with
`documented(body=..., returns=...)`, and the schemas are msgspec's own, the same
code that decodes the requests and encodes the answers. Every route documents its
error statuses; a 500 is documented nowhere, so a fuzzer that meets one fails.
"""

from __future__ import annotations

import copy
import html
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Request
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin
from litestar.openapi.spec import (
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Reference,
    RequestBody,
    Schema,
)

from omlx import __version__
from omlx.schemas.anthropic import ApiError
from omlx.schemas.openai import ErrorBody

REF = "#/components/schemas/{name}"
_TYPES: set[Any] = {ErrorBody, ApiError}  # every Struct a route names, for the components


def _ref(type_: Any) -> Reference | Schema:
    if type_ is int:  # POST /api/cache/clear answers a count
        return Schema(type=OpenAPIType.INTEGER)
    _TYPES.add(type_)
    return Reference(ref=REF.format(name=type_.__name__))


def _json(type_: Any) -> dict[str, OpenAPIMediaType]:
    return {"application/json": OpenAPIMediaType(schema=_ref(type_))}


def _errors(dialect: str, statuses: tuple[str, ...]) -> dict[str, OpenAPIResponse]:
    body = ApiError if dialect == "anthropic" else ErrorBody
    what = {
        "4XX": "Invalid request, missing or wrong API key (401), refused host or origin "
        "(403), unknown model (404), body too large (413) or not JSON (415)",
        "503": "Overloaded: retry after the Retry-After header",
        "529": "Overloaded (Anthropic's status): retry after the Retry-After header",
    }
    return {s: OpenAPIResponse(description=what[s], content=_json(body)) for s in statuses}


def documented(
    *,
    body: Any = None,
    returns: Any = None,
    events: bool = False,
    dialect: str = "openai",
    overload: bool = False,
) -> type[Operation]:
    """An Operation class for one route: its JSON body, its answer and its errors.

    `events`: with `"stream": true` the answer is server-sent events instead.
    `overload`: the route runs a model and may answer 503 (529 for Anthropic).
    """
    statuses: tuple[str, ...] = ("4XX",)
    if overload:
        statuses += ("529",) if dialect == "anthropic" else ("503",)
    ok: dict[str, OpenAPIMediaType] = _json(returns) if returns is not None else {}
    if events:
        ok["text/event-stream"] = OpenAPIMediaType(
            schema=Schema(type=OpenAPIType.STRING, description="server-sent events (stream: true)")
        )
    request_body = RequestBody(content=_json(body), required=True) if body is not None else None

    @dataclass
    class DocumentedOperation(Operation):
        def __post_init__(self) -> None:
            if request_body is not None:
                self.request_body = request_body
            responses = dict(self.responses or {})
            if ok:
                responses["200"] = OpenAPIResponse(description="Success", content=ok)
            responses.pop("400", None)  # Litestar's own shape: ours is under 4XX
            responses.update(_errors(dialect, statuses))
            self.responses = responses

    return DocumentedOperation


def complete(schema: dict[str, Any]) -> dict[str, Any]:
    """Litestar's schema plus msgspec's component schemas of every documented type, and
    the error answers on routes that did not name them (every route sits behind the
    key and origin guards, so every route can answer 401 or 403)."""
    out = copy.deepcopy(schema)
    _, components = msgspec.json.schema_components(sorted(_TYPES, key=str), ref_template=REF)
    out.setdefault("components", {}).setdefault("schemas", {}).update(components)
    errors = {"$ref": REF.format(name=ErrorBody.__name__)}
    for item in out.get("paths", {}).values():
        for op in item.values():
            if isinstance(op, dict) and "4XX" not in op.get("responses", {"4XX": None}):
                op["responses"].pop("400", None)  # Litestar's shape; ours is ErrorBody
                op["responses"]["4XX"] = {
                    "description": "Invalid request, or refused by the key or origin guard",
                    "content": {"application/json": {"schema": errors}},
                }
    return out


class SchemaJson(JsonRenderPlugin):
    """/openapi.json, completed with the body schemas."""

    def __init__(self) -> None:
        super().__init__(path="/openapi.json")
        self._rendered: bytes | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        if self._rendered is None:
            self._rendered = self.render_json(request, complete(openapi_schema))
        return self._rendered


class OfflineDocs(OpenAPIRenderPlugin):
    """/docs: every operation with its body and answers, as one page with no scripts and
    nothing fetched (the stock UIs load their JavaScript from CDNs)."""

    def __init__(self) -> None:
        super().__init__(path=["/docs"])

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        return docs_page(complete(openapi_schema)).encode()


def _schema_name(media: dict[str, Any]) -> str:
    schema = media.get("schema", {})
    ref = schema.get("$ref", "")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        return f'<a href="#schema-{html.escape(name)}">{html.escape(name)}</a>'
    return html.escape(schema.get("description") or schema.get("type") or "")


def _media(content: dict[str, Any]) -> list[str]:
    return [f"{html.escape(t)} {_schema_name(m)}" for t, m in content.items()]


def docs_page(schema: dict[str, Any]) -> str:
    rows: list[str] = []
    for path, item in schema.get("paths", {}).items():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            body = ", ".join(_media(op.get("requestBody", {}).get("content", {})))
            answers = "; ".join(
                f"{html.escape(code)}: {', '.join(_media(r.get('content', {})))}"
                for code, r in op["responses"].items()
            )
            rows.append(
                f"<tr><td><b>{method.upper()}</b> <code>{html.escape(path)}</code></td>"
                f"<td>{body}</td><td>{answers}</td></tr>"
            )
    schemas = "".join(
        f'<h3 id="schema-{html.escape(name)}">{html.escape(name)}</h3>'
        f"<pre>{html.escape(msgspec.json.format(msgspec.json.encode(s)).decode())}</pre>"
        for name, s in sorted(schema.get("components", {}).get("schemas", {}).items())
    )
    title = html.escape(schema.get("info", {}).get("title", "API"))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title} API</title>"
        "<style>body{font-family:sans-serif;margin:2em}td{vertical-align:top;padding:4px 8px;"
        "border-bottom:1px solid #ddd}pre{background:#f6f6f6;padding:8px;overflow:auto}</style>"
        f"</head><body><h1>{title} API</h1><p>Machine-readable: "
        "<a href='/openapi.json'>/openapi.json</a></p><table><tr><th>operation</th>"
        f"<th>JSON body</th><th>answers</th></tr>{''.join(rows)}</table>"
        f"<h2>Schemas</h2>{schemas}</body></html>"
    )


def openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="omlx",
        version=__version__,
        path="/",
        render_plugins=[OfflineDocs(), SchemaJson()],
    )

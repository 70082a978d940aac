"""Reading a JSON request body: media type, size, nesting depth, then the route's Struct.

Each check is cheap and runs before the decode: a browser form posted cross-site is
not JSON (415), a text body past `server.max_request_bytes` is refused (413; only
bodies with images may reach `max_image_request_bytes`), and nesting past
`MAX_JSON_DEPTH` is a 400 instead of a RecursionError deep inside the decoder.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.exceptions import HTTPException, InternalServerException

from omlx.errors import InvalidRequest, UnsupportedMediaType
from omlx.server.errors import invalid_body
from omlx.server.event_stream import ClientDisconnected

T = TypeVar("T")

# Real requests nest a dozen levels (a tool's JSON schema inside tools inside the
# body); 64 leaves room for deep schemas and keeps every recursive walk shallow.
MAX_JSON_DEPTH = 64

_BRACKETS_ONLY = bytes(range(256)).translate(None, b"[]{}")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_IMAGE_PART = re.compile(rb'"type"\s*:\s*"(?:input_)?image')


def json_depth_exceeds(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays/objects nest deeper than `limit` (strings may hold any brackets).

    C-speed passes: strings are blanked, everything but brackets dropped, then each
    pass removes the innermost pairs; more than `limit` passes means too deep.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    structure = _STRING.sub(b"", raw).translate(None, _BRACKETS_ONLY)
    for _ in range(limit):
        if not structure:
            return False
        shorter = structure.replace(b"[]", b"").replace(b"{}", b"")
        if len(shorter) == len(structure):
            return False  # unbalanced: the decoder reports it
        structure = shorter
    return bool(structure)


def is_json_media_type(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def decode_body(raw: bytes, type_: type[T]) -> T:
    """Decode a JSON body into its Struct; any mismatch is a 400 naming the field."""
    if not raw.strip():
        raise InvalidRequest("request body is empty; expected a JSON object")
    if json_depth_exceeds(raw):
        raise InvalidRequest(
            f"request body nests arrays/objects more than {MAX_JSON_DEPTH} levels deep"
        )
    try:
        return msgspec.json.decode(raw, type=type_)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise invalid_body(e) from None


async def read_json(request: Request[Any, Any, Any], type_: type[T], *, images: bool = False) -> T:
    """The body of a JSON endpoint as `type_`; `images` for routes that take image parts."""
    if not is_json_media_type(request.headers.get("content-type")):
        raise UnsupportedMediaType(
            "this endpoint takes a JSON body: send 'Content-Type: application/json'"
        )
    try:
        raw = await request.body()
    except InternalServerException as e:  # Litestar's word for a client gone mid-body
        if "disconnected" in str(e.detail):
            raise ClientDisconnected("client disconnected while sending the body") from None
        raise
    limit = request.app.state["settings"].server.max_request_bytes
    if len(raw) > limit and not (images and _IMAGE_PART.search(raw)):
        raise HTTPException(
            status_code=413,
            detail=f"request body of {len(raw)} bytes is over the limit of {limit} bytes "
            "(server.max_request_bytes; larger bodies only with images)",
        )
    return decode_body(raw, type_)

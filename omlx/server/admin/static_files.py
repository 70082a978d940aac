"""The admin's static files, from memory, under a versioned path.

`/admin/static/<version>/js/chat.js`: the version is a hash of all the files (render.py),
so relative imports between ES modules (`./core.js`) carry it too, and a file can be
cached for good. Files are read once and kept with a gzip copy (about 350 KB in all).
"""

from __future__ import annotations

import functools
import gzip
import mimetypes
from dataclasses import dataclass
from typing import Any

from litestar import Request, Response, get

from omlx.errors import NotFound
from omlx.server.admin.render import STATIC_DIR, static_version

TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml",
         ".json": "application/json", ".txt": "text/plain"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _File:
    body: bytes
    gzipped: bytes
    media_type: str


@functools.cache
def _load(rel: str) -> _File | None:
    path = (STATIC_DIR / rel).resolve()
    if not path.is_relative_to(STATIC_DIR.resolve()) or not path.is_file():
        return None
    body = path.read_bytes()
    media = (
        TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    )
    if media.startswith("text/") or media.endswith(("json", "xml")):
        media += "; charset=utf-8"
    return _File(body, gzip.compress(body, 9, mtime=0), media)


@get("/admin/static/{version:str}/{rel:path}", include_in_schema=False)
async def static_file(request: Request[Any, Any, Any]) -> Response[bytes]:
    version, rel = request.path_params["version"], request.path_params["rel"]
    found = _load(rel.lstrip("/"))
    if found is None:
        raise NotFound(f"no static file {rel}")
    current = version == static_version()
    headers = {
        # An old version's URL gets today's file, but must not be cached as if it were old.
        "Cache-Control": "public, max-age=31536000, immutable" if current else "no-cache",
        "Vary": "Accept-Encoding",
    }
    body = found.body
    if "gzip" in request.headers.get("accept-encoding", "") and len(found.gzipped) < len(body):
        body = found.gzipped
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type=found.media_type, headers=headers)


ROUTES = [static_file]

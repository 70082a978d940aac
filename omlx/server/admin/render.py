"""HTML for the admin: Jinja templates (autoescaped), the page context, static URLs."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import jinja2
from litestar import Request, Response

from omlx import __version__
from omlx.server.admin.i18n import LANG_COOKIE, LANGUAGES, js_strings, negotiate, translator

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
THEME_COOKIE = "omlx_theme"
THEMES = ("system", "light", "dark")

# Pages in the order of the navigation: (name, path, catalog key of the label).
PAGES = [
    ("dashboard", "/admin", "nav.dashboard"),
    ("models", "/admin/models", "nav.models"),
    ("chat", "/admin/chat", "nav.chat"),
    ("bench", "/admin/bench", "nav.bench"),
    ("cache", "/admin/cache", "nav.cache"),
    ("settings", "/admin/settings", "nav.settings"),
    ("logs", "/admin/logs", "nav.logs"),
    ("integrations", "/admin/integrations", "nav.integrations"),
]


@functools.cache
def static_version() -> str:
    """A hash of every static file: URLs change when a file does, so they cache for good."""
    digest = hashlib.sha256()
    for path in sorted(STATIC_DIR.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(STATIC_DIR).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def static_url(path: str) -> str:
    return f"/admin/static/{static_version()}/{path}"


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(static=static_url, version=__version__, pages=PAGES, languages=LANGUAGES)
    return env


def request_lang(request: Request[Any, Any, Any]) -> str:
    return negotiate(request.cookies.get(LANG_COOKIE), request.headers.get("accept-language"))


def request_theme(request: Request[Any, Any, Any]) -> str:
    theme = request.cookies.get(THEME_COOKIE, "system")
    return theme if theme in THEMES else "system"


def _json_for_html(value: Any) -> str:
    # Inside <script type="application/json">: "</" must not close the element.
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/")


def render(
    request: Request[Any, Any, Any],
    template: str,
    *,
    status_code: int = 200,
    **context: Any,
) -> Response[str]:
    lang = request_lang(request)
    context.setdefault("locked", False)
    html = (
        environment()
        .get_template(template)
        .render(
            t=translator(lang),
            lang=lang,
            theme=request_theme(request),
            js_strings=_json_for_html(js_strings(lang)),
            csrf=context.pop("csrf", ""),
            **context,
        )
    )
    return Response(
        html,
        status_code=status_code,
        media_type="text/html; charset=utf-8",
        # Pages carry the session's CSRF token: never cached, never stored.
        headers={"Cache-Control": "no-store", "Vary": "Cookie, Accept-Language"},
    )

"""The admin's HTML pages, the login form and logout.

Every page is rendered with the session's CSRF token; in open mode a page visit starts
a session (it only carries that token), in locked mode it sends the browser to the login.
The login form has its own token, bound to a short-lived nonce cookie, so another site
cannot log a browser in to this one. Failed logins are throttled per client address and
logged without the value that was tried.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Annotated, Any
from urllib.parse import quote

from litestar import Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Redirect

from omlx.server.admin.access import Mode, session_of
from omlx.server.admin.core import Admin, admin_of
from omlx.server.admin.credentials import accepts
from omlx.server.admin.integrations import cards
from omlx.server.admin.render import PAGES, render
from omlx.server.admin.session import COOKIE

log = logging.getLogger(__name__)

NONCE_COOKIE = "omlx_login"
PAGE_TEMPLATES = {name: f"{name}.html.jinja" for name, _, _ in PAGES}


def _cookie(request: Request[Any, Any, Any], key: str, value: str, **kw: Any) -> Cookie:
    return Cookie(
        key=key,
        value=value,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        **kw,
    )


def _safe_next(target: str | None) -> str:
    """Only a path inside the admin: never another site (`//host`, `https://...`)."""
    if target and target.startswith("/admin") and not target.startswith("//"):
        return target
    return "/admin"


def _refused(request: Request[Any, Any, Any]) -> Response[str]:
    return render(request, "refused.html.jinja", status_code=403, page="refused")


def _page(request: Request[Any, Any, Any], name: str, **context: Any) -> Response[Any]:
    admin = admin_of(request)
    mode = admin.mode()
    if mode is Mode.REFUSED:
        return _refused(request)
    session, cookie_value = session_of(request.scope), None
    if session is None:
        if mode is Mode.LOCKED:
            return Redirect(f"/admin/login?next={quote(request.url.path)}")
        session, cookie_value = admin.sessions.create(authenticated=False)
    response = render(
        request,
        PAGE_TEMPLATES[name],
        page=name,
        csrf=session.csrf,
        locked=mode is Mode.LOCKED,
        **context,
    )
    if cookie_value is not None:
        response.cookies.append(_cookie(request, COOKIE, cookie_value))
    return response


@get("/admin", include_in_schema=False)
async def dashboard(request: Request[Any, Any, Any]) -> Response[Any]:
    return _page(request, "dashboard")


@get("/admin/{name:str}", include_in_schema=False)
async def page(request: Request[Any, Any, Any]) -> Response[Any]:
    name = request.path_params["name"]
    if name not in PAGE_TEMPLATES or name == "dashboard":
        return render(request, "not_found.html.jinja", status_code=404, page="not_found")
    extra: dict[str, Any] = {}
    if name == "integrations":
        extra["tools"] = await asyncio.to_thread(cards)
    return _page(request, name, **extra)


@get("/admin/login", include_in_schema=False)
async def login_form(request: Request[Any, Any, Any]) -> Response[Any]:
    next_path = request.query_params.get("next")
    admin = admin_of(request)
    mode = admin.mode()
    if mode is Mode.REFUSED:
        return _refused(request)
    session = session_of(request.scope)
    if mode is Mode.OPEN or (session is not None and session.authenticated):
        return Redirect(_safe_next(next_path))
    return _login_page(request, admin, _safe_next(next_path))


def _login_page(
    request: Request[Any, Any, Any], admin: Admin, next_path: str, *, error: str = "",
    status_code: int = 200,
) -> Response[Any]:  # fmt: skip
    nonce = secrets.token_urlsafe(24)
    response = render(
        request, "login.html.jinja", status_code=status_code, page="login",
        login_token=admin.sessions.login_token(nonce), next_path=next_path, error=error,
        has_password=bool(admin.password_hash), has_key=bool(admin.api_key),
    )  # fmt: skip
    response.cookies.append(_cookie(request, NONCE_COOKIE, nonce, max_age=3600))
    return response


@post("/admin/login", include_in_schema=False, status_code=303)
async def login(
    request: Request[Any, Any, Any],
    data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Response[Any]:
    admin = admin_of(request)
    if admin.mode() is not Mode.LOCKED:
        return Redirect("/admin")
    next_path = _safe_next(data.get("next"))
    client = request.client.host if request.client else "unknown"
    wait_s = admin.throttle.retry_after_s(client)
    if wait_s > 0:
        log.warning("admin login from %s refused: too many failed attempts", client)
        response = _login_page(request, admin, next_path, error="login.too_many", status_code=429)
        response.headers["Retry-After"] = str(int(wait_s) + 1)
        return response
    if not admin.sessions.login_token_matches(request.cookies.get(NONCE_COOKIE), data.get("token")):
        return _login_page(request, admin, next_path, error="login.expired", status_code=403)
    secret = data.get("secret", "")
    if not secret or not accepts(secret, api_key=admin.api_key, password_hash=admin.password_hash):
        failures = admin.throttle.failed(client)
        log.warning("admin login failed from %s (%d recent failures)", client, failures)
        return _login_page(request, admin, next_path, error="login.wrong", status_code=401)
    admin.throttle.succeeded(client)
    old = session_of(request.scope)
    if old is not None:
        admin.sessions.end(old.id)
    _, cookie_value = admin.sessions.create(authenticated=True)
    log.info("admin login from %s", client)
    response = Redirect(next_path, status_code=303)
    response.cookies.append(_cookie(request, COOKIE, cookie_value))
    response.cookies.append(_cookie(request, NONCE_COOKIE, "", max_age=0))
    return response


@post("/admin/logout", include_in_schema=False, status_code=200)
async def logout(request: Request[Any, Any, Any]) -> Response[Any]:
    """Ends the session (the middleware checked its CSRF token); the page then goes to login."""
    session = session_of(request.scope)
    if session is not None:
        admin_of(request).sessions.end(session.id)
    response: Response[Any] = Response({"ok": True})
    response.cookies.append(_cookie(request, COOKIE, "", max_age=0))
    return response


PUBLIC_ROUTES = [dashboard, login_form, login, page]
ROUTES = [*PUBLIC_ROUTES, logout]

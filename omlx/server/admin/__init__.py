"""The web admin at /admin: pages, its JSON API, sessions, CSRF and the static files.

`create_app` builds one `Admin` (core.py) per app and mounts `routes()`; the admin's
browser code calls /v1 and /api with its session cookie (access.py), never with the key.
"""

from __future__ import annotations

import re
from typing import Any

from omlx.server.admin import api_misc, api_models, api_settings, pages, static_files
from omlx.server.admin.core import Admin, AdminOptions

__all__ = ["PUBLIC_TEMPLATES", "Admin", "AdminOptions", "routes"]


def _template(path: str) -> str:
    """ "/admin/{name:str}" -> "/admin/{name}", the form Litestar puts in scope["path_template"]."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


# Routes the API-key guard lets through without the key: the pages (each sends a browser
# without a session to the login itself), the login form and the static files. The admin's
# JSON API is not among them: it needs the key or a session like /v1 does.
PUBLIC_TEMPLATES = frozenset(
    _template(path)
    for handler in (*pages.PUBLIC_ROUTES, *static_files.ROUTES)
    for path in handler.paths
)


def routes() -> list[Any]:
    return [
        *pages.ROUTES,
        *api_models.ROUTES,
        *api_settings.ROUTES,
        *api_misc.ROUTES,
        *static_files.ROUTES,
    ]

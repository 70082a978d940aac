"""Cross-site and DNS-rebinding protection: the Host and Origin checks of every route.

A web page can make a browser send POSTs to a loopback server (forms, `text/plain`
fetches need no CORS preflight), and a name the page's owner controls can be
rebound to 127.0.0.1. So: the Host header must name this server (an IP literal,
localhost, this machine, the bound host or `server.allowed_hosts`), and a request
that changes state or generates must come from no page at all (CLIs send no
Origin), a loopback page, this server's own pages or `server.cors_origins`.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from omlx.errors import HostNotAllowed, OriginNotAllowed

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _host_name(authority: str) -> str:
    """ "Example.com:8000" -> "example.com"; "[::1]:8000" -> "::1"."""
    try:
        name = urlsplit("//" + authority).hostname
    except ValueError:
        return authority.lower()
    return name or ""


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    """Which Host headers and page origins this server answers."""

    host_names: frozenset[str]  # lower-case names; "*" turns the Host check off
    origins: frozenset[str]  # exact "scheme://host[:port]"; "*" allows every page

    @classmethod
    def build(
        cls, bound_host: str, allowed_hosts: Iterable[str], cors_origins: Iterable[str]
    ) -> OriginPolicy:
        names = {bound_host.lower(), socket.gethostname().lower(), "localhost"}
        names.update(h.lower() for h in allowed_hosts)
        return cls(frozenset(names), frozenset(o.rstrip("/").lower() for o in cors_origins))

    def host_allowed(self, host_header: str | None) -> bool:
        # A name only a rebinding attacker would send is refused; an IP literal cannot
        # be rebound, and an absent Host (HTTP/1.0 clients) comes from no browser.
        if not host_header or "*" in self.host_names:
            return True
        name = _host_name(host_header)
        return _is_ip(name) or _is_loopback(name) or name in self.host_names

    def origin_allowed(self, origin: str | None, host_header: str | None) -> bool:
        if origin is None or "*" in self.origins:
            return True
        origin = origin.rstrip("/").lower()
        if origin in self.origins:
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null" (sandboxed frames, file:// pages) and the like
        # The server's own pages post with their own origin; their Host passed above.
        same_origin = host_header is not None and parts.netloc == host_header.lower()
        return same_origin or _is_loopback(parts.hostname)


def make_origin_guard(policy: OriginPolicy) -> Guard:
    """Refuse foreign Host headers (403) and state-changing requests from foreign pages."""

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        host = connection.headers.get("host")
        if not policy.host_allowed(host):
            raise HostNotAllowed(
                f"host {host!r} is not served here; add it to server.allowed_hosts"
            )
        method = connection.scope.get("method", "GET")
        origin = connection.headers.get("origin")
        if method not in SAFE_METHODS and not policy.origin_allowed(origin, host):
            raise OriginNotAllowed(
                f"requests from pages at {origin!r} are refused; add the origin to "
                "server.cors_origins to allow it"
            )

    return guard

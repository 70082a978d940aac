"""The running omlx server as a launcher sees it: health, and the models a tool can use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

# Models a coding agent can chat with; embedding models and rerankers cannot.
CHAT_TYPES = ("llm", "vlm")
# When the server knows no window for a model: what tools get told (a common small size).
FALLBACK_CONTEXT_TOKENS = 8192


class ServerError(Exception):
    """The server cannot be reached or answered something unexpected."""


@dataclass(frozen=True, slots=True)
class ServedModel:
    id: str
    type: str  # llm | vlm
    context_tokens: int
    max_output_tokens: int
    state: str = "available"

    @property
    def is_vision(self) -> bool:
        return self.type == "vlm"


@dataclass(frozen=True, slots=True)
class Server:
    """Where the server listens; `root` has no trailing slash and no /v1."""

    root: str
    api_key: str = ""

    @property
    def openai_base(self) -> str:
        return f"{self.root}/v1"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _get(self, path: str, timeout_s: float = 5.0) -> Any:
        try:
            r = httpx.get(f"{self.root}{path}", headers=self._headers(), timeout=timeout_s)
        except httpx.HTTPError as e:
            raise ServerError(
                f"no omlx server answers at {self.root} ({type(e).__name__}); "
                "start one with `omlx serve` or pass --url"
            ) from None
        if r.status_code == 401:
            raise ServerError(
                f"{self.root} wants an API key: set server.api_key (or OMLX_SERVER__API_KEY)"
            )
        if r.status_code != 200:
            raise ServerError(f"GET {self.root}{path} answered HTTP {r.status_code}")
        try:
            return r.json()
        except ValueError:
            raise ServerError(f"GET {self.root}{path} did not answer JSON") from None

    def check_health(self) -> str:
        """The server's version; ServerError when it is not an omlx server that is up."""
        body = self._get("/health")
        if not isinstance(body, dict) or body.get("status") != "ok":
            raise ServerError(f"{self.root}/health did not answer status ok")
        return str(body.get("version", ""))

    def chat_models(self) -> list[ServedModel]:
        """Text and vision models, with the context window and output limit the server
        reports in /v1/models/status (older servers: /v1/models, then a fallback)."""
        status = self._get("/v1/models/status").get("data", [])
        listed = {m.get("id"): m for m in self._get("/v1/models").get("data", [])}
        out = []
        for row in status:
            if row.get("type") not in CHAT_TYPES:
                continue
            card = listed.get(row["id"], {})
            context = row.get("context_length") or card.get("context_length")
            context = int(context or FALLBACK_CONTEXT_TOKENS)
            output = int(row.get("max_output_tokens") or max(1, context // 4))
            out.append(
                ServedModel(
                    id=row["id"],
                    type=row["type"],
                    context_tokens=context,
                    max_output_tokens=min(output, context),
                    state=str(row.get("state", "available")),
                )
            )
        return out


def server_root(url: str) -> str:
    """`http://h:p`, `http://h:p/`, `http://h:p/v1` all → `http://h:p`."""
    root = url.strip().rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    if "://" not in root:
        root = f"http://{root}"
    return root


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a server bound to host:port."""
    if host in ("0.0.0.0", "", "::"):  # bound to every interface: reach it on loopback
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"

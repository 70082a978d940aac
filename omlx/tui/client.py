"""HTTP client for a running omlx server: the stats stream and model actions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import msgspec

from omlx.schemas.stats import StatsSnapshot

_decoder = msgspec.json.Decoder(StatsSnapshot)


class ServerUnavailable(Exception):
    """The server cannot be reached or answered with an error."""


class OmlxClient:
    def __init__(self, base_url: str, api_key: str = "", timeout_s: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, read=timeout_s * 3),
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def snapshot(self) -> StatsSnapshot:
        try:
            resp = await self._http.get("/api/stats")
        except httpx.HTTPError as e:
            raise ServerUnavailable(f"{self.base_url}: {type(e).__name__}") from None
        if resp.status_code != 200:
            raise ServerUnavailable(f"{self.base_url}: HTTP {resp.status_code}")
        return _decoder.decode(resp.content)

    async def stream(self) -> AsyncIterator[StatsSnapshot]:
        """Snapshots from /api/stats/stream until the connection ends."""
        try:
            async with self._http.stream("GET", "/api/stats/stream") as resp:
                if resp.status_code != 200:
                    raise ServerUnavailable(f"{self.base_url}: HTTP {resp.status_code}")
                async for line in resp.aiter_lines():
                    if line.startswith("data:"):
                        yield _decoder.decode(line[5:].strip())
        except httpx.HTTPError as e:
            raise ServerUnavailable(f"{self.base_url}: {type(e).__name__}") from None

    async def model_action(self, model: str, action: str) -> str:
        """POST /v1/models/{model}/{action} (load, unload, pin, unpin); returns a message."""
        try:
            resp = await self._http.post(f"/v1/models/{quote(model, safe='')}/{action}")
        except httpx.HTTPError as e:
            return f"{action} {model}: {type(e).__name__}"
        if resp.status_code >= 400:
            try:
                detail = resp.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                detail = f"HTTP {resp.status_code}"
            return f"{action} {model} failed: {detail}"
        return f"{action} {model}: ok"

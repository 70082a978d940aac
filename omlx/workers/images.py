"""Images of chat requests: decode data URLs, fetch http(s) URLs, read allowed local paths.

Each image is checked (a size cap, a real decodable image) and hashed: the sha256 of
its decoded bytes is stable across requests and is passed to the prefix cache as an
extra key, so cached KV blocks never mix two different images. No MLX here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omlx.errors import InvalidRequest

IMAGE_PART_TYPES = ("image_url", "input_image", "image")
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024
DEFAULT_FETCH_TIMEOUT_S = 10.0
MAX_IMAGE_PIXELS = 64_000_000  # decompression bombs: refuse before decoding


@dataclass(frozen=True, slots=True)
class ImageLimits:
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S
    allow_local_paths: bool = False


@dataclass(frozen=True, slots=True)
class LoadedImage:
    data: bytes  # the encoded file (PNG, JPEG, ...) as received
    sha256: str
    width: int
    height: int
    format: str

    def to_pil(self) -> Any:
        from PIL import Image

        image = Image.open(io.BytesIO(self.data))
        return image.convert("RGB")


def image_refs(messages: Iterable[Any]) -> list[tuple[str, str]]:
    """(reference, param path) of every image part, in order, from chat messages.

    Accepts ChatMessage objects or dicts; an image part is OpenAI's
    `{"type": "image_url", "image_url": {"url": ...}}` or a bare `"image_url": "..."`.
    """
    refs: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else getattr(m, "content", None)
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in IMAGE_PART_TYPES:
                continue
            value = part.get("image_url") or part.get("image") or part.get("url")
            if isinstance(value, dict):
                value = value.get("url")
            param = f"messages[{i}].content[{j}]"
            if not isinstance(value, str) or not value:
                raise InvalidRequest("an image part has no url", param=param)
            refs.append((value, param))
    return refs


async def load_images(refs: list[tuple[str, str]], limits: ImageLimits) -> list[LoadedImage]:
    return [await load_image(ref, limits, param=param) for ref, param in refs]


async def load_image(ref: str, limits: ImageLimits, *, param: str = "image_url") -> LoadedImage:
    """Any accepted reference -> a checked image; InvalidRequest (400) for anything else."""
    if ref.startswith("data:"):
        data = _decode_data_url(ref, limits, param)
    elif ref.startswith(("http://", "https://")):
        data = await _fetch(ref, limits, param)
    else:
        data = _read_local(ref, limits, param)
    return check_image(data, limits, param=param)


def check_image(data: bytes, limits: ImageLimits, *, param: str = "image_url") -> LoadedImage:
    if len(data) > limits.max_bytes:
        raise InvalidRequest(
            f"image is {len(data)} bytes; the limit is {limits.max_bytes}", param=param
        )
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise InvalidRequest(
                    f"image is {width}x{height} pixels; the limit is {MAX_IMAGE_PIXELS}",
                    param=param,
                )
            fmt = image.format or "unknown"
            image.verify()  # reads the whole file: truncated or corrupt data fails here
    except InvalidRequest:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise InvalidRequest(f"not a readable image: {e}", param=param) from None
    return LoadedImage(data, hashlib.sha256(data).hexdigest(), width, height, fmt)


def _decode_data_url(ref: str, limits: ImageLimits, param: str) -> bytes:
    header, sep, payload = ref.partition(",")
    if not sep or ";base64" not in header:
        raise InvalidRequest(
            "image data URLs must be base64 (data:image/png;base64,...)", param=param
        )
    # base64 is 4/3 of the bytes: refuse oversized payloads before decoding them
    if len(payload) * 3 // 4 > limits.max_bytes + 3:
        raise InvalidRequest(
            f"image is about {len(payload) * 3 // 4} bytes; the limit is {limits.max_bytes}",
            param=param,
        )
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("image data URL is not valid base64", param=param) from None


async def _fetch(url: str, limits: ImageLimits, param: str) -> bytes:
    import httpx

    try:
        async with (
            httpx.AsyncClient(timeout=limits.fetch_timeout_s, follow_redirects=True) as client,
            client.stream("GET", url) as resp,
        ):
            if resp.status_code != 200:
                raise InvalidRequest(
                    f"fetching the image failed: HTTP {resp.status_code} from {url}", param=param
                )
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > limits.max_bytes:  # stop reading: never buffer more than the cap
                    raise InvalidRequest(
                        f"image at {url} exceeds the {limits.max_bytes}-byte limit", param=param
                    )
                chunks.append(chunk)
    except httpx.HTTPError as e:
        raise InvalidRequest(
            f"cannot fetch the image at {url}: {type(e).__name__}", param=param
        ) from None
    return b"".join(chunks)


def _read_local(ref: str, limits: ImageLimits, param: str) -> bytes:
    if not limits.allow_local_paths:
        raise InvalidRequest(
            "image urls must be data: or http(s): URLs (local paths are off; "
            "settings models.image_local_paths)",
            param=param,
        )
    path = Path(ref.removeprefix("file://")).expanduser()
    try:
        if path.stat().st_size > limits.max_bytes:
            raise InvalidRequest(
                f"image {path} exceeds the {limits.max_bytes}-byte limit", param=param
            )
        return path.read_bytes()
    except OSError as e:
        raise InvalidRequest(f"cannot read image {path}: {e.strerror}", param=param) from None


def image_extra_keys(images: Iterable[LoadedImage]) -> tuple[str, ...]:
    """What the prefix cache keys on besides token ids: one hash per image, in order."""
    return tuple(f"image:{im.sha256}" for im in images)

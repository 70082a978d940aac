"""Image references of chat requests: data URLs, http(s) with caps and timeouts, local paths."""

from __future__ import annotations

import asyncio
import base64
import io
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from PIL import Image

from omlx.errors import InvalidRequest
from omlx.workers.images import (
    ImageLimits,
    image_extra_keys,
    image_refs,
    load_image,
)


def png(color: str = "red", size: tuple[int, int] = (8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def load(ref: str, **limits) -> object:
    return asyncio.run(load_image(ref, ImageLimits(**limits)))


def test_data_url_decodes_and_hashes_stably() -> None:
    a1, a2, b = load(data_url(png())), load(data_url(png())), load(data_url(png("blue")))
    assert (a1.width, a1.height, a1.format) == (8, 6, "PNG")
    assert a1.sha256 == a2.sha256 != b.sha256
    assert len(a1.sha256) == 64
    assert image_extra_keys([a1, b]) == (f"image:{a1.sha256}", f"image:{b.sha256}")
    assert a1.to_pil().size == (8, 6)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (data_url(b"hello, not an image"), "not a readable image"),
        (data_url(png()[:40]), "not a readable image"),  # truncated
        ("data:image/png;base64,@@@@", "not valid base64"),
        ("data:image/png,rawtext", "must be base64"),
        ("/etc/hostname", "local paths are off"),
    ],
)
def test_bad_images_are_invalid_requests(ref: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        load(ref)


def test_too_large_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="limit is 100"):
        load(data_url(png(size=(64, 64))), max_bytes=100)


def test_local_paths_only_when_allowed(tmp_path) -> None:
    f = tmp_path / "x.png"
    f.write_bytes(png())
    assert load(str(f), allow_local_paths=True).width == 8
    with pytest.raises(InvalidRequest, match="cannot read image"):
        load(str(tmp_path / "missing.png"), allow_local_paths=True)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/ok.png":
            body = png()
        elif self.path == "/big.png":
            body = b"\x89PNG" + b"0" * 5000
        elif self.path == "/slow.png":
            threading.Event().wait(2)
            body = png()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_base():
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(30)
def test_http_fetch(http_base: str) -> None:
    assert load(f"{http_base}/ok.png").sha256 == load(data_url(png())).sha256
    with pytest.raises(InvalidRequest, match="HTTP 404"):
        load(f"{http_base}/missing.png")
    with pytest.raises(InvalidRequest, match="exceeds the 1000-byte limit"):
        load(f"{http_base}/big.png", max_bytes=1000)
    with pytest.raises(InvalidRequest, match=r"cannot fetch.*Timeout"):
        load(f"{http_base}/slow.png", fetch_timeout_s=0.3)
    with pytest.raises(InvalidRequest, match="cannot fetch"):
        load("http://127.0.0.1:9/unreachable.png", fetch_timeout_s=2)


def test_image_refs_from_messages() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:a"}},
                {"type": "image_url", "image_url": "data:b"},
            ],
        },
    ]
    assert image_refs(messages) == [
        ("data:a", "messages[1].content[1]"),
        ("data:b", "messages[1].content[2]"),
    ]
    with pytest.raises(InvalidRequest, match="no url"):
        image_refs([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])


def test_imports_without_mlx() -> None:
    code = "import sys; sys.modules['mlx'] = None; import omlx.workers.images"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

"""A tiny random qwen2_vl served through mlx-vlm: base64 images, bad images -> 400."""

from __future__ import annotations

import asyncio
import base64
import io
import sys
from pathlib import Path

import httpx
import openai
import pytest
from PIL import Image

from omlx.pool.pool import LocalModelPool
from omlx.settings import ModelSettings, Settings
from tests.fixtures.live_server import running_server
from tests.fixtures.tiny_vlm import build_tiny_qwen2_vl

pytestmark = pytest.mark.timeout(180)


def png_data_url(color: str, size: tuple[int, int] = (64, 48)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def image_message(url: str, text: str = "what is this?") -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "text", "text": text},
            ],
        }
    ]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, tiny_qwen3_dir: Path):
    root = tmp_path_factory.mktemp("vlm")
    models = {
        "vlm": build_tiny_qwen2_vl(root / "tiny-qwen2-vl"),
        "ocr": build_tiny_qwen2_vl(root / "tiny-qwen2-vl-ocr", seed=1),  # an OCR fine-tune by name
        "q": tiny_qwen3_dir,
    }
    # The big test PNG is ~25 kB: a 20 kB cap refuses it.
    settings = Settings(models=ModelSettings(image_max_bytes=20_000, image_fetch_timeout_s=3))
    pool = LocalModelPool(settings, models=models)
    with running_server(pool, settings) as server:
        yield server
    asyncio.run(pool.close(grace_s=0))


def test_vlm_chat_with_base64_image(live) -> None:
    client = openai.OpenAI(base_url=live.openai_base_url, api_key="x")
    kwargs = {"model": "vlm", "max_tokens": 6, "temperature": 0}
    red = client.chat.completions.create(messages=image_message(png_data_url("red")), **kwargs)
    again = client.chat.completions.create(messages=image_message(png_data_url("red")), **kwargs)
    assert red.choices[0].message.content
    assert red.choices[0].message.content == again.choices[0].message.content  # greedy
    assert red.usage.completion_tokens == 6 and red.usage.prompt_tokens > 10
    chunks = client.chat.completions.create(
        messages=image_message(png_data_url("red")), stream=True, **kwargs
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == red.choices[0].message.content


def test_ocr_model_uses_its_preset(live) -> None:
    messages = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": png_data_url("white")}}],
        }
    ]
    r = httpx.post(
        f"{live.openai_base_url}/chat/completions",
        json={"model": "ocr", "messages": messages, "max_tokens": 4, "temperature": 0},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    models = {
        m["id"]: m["type"] for m in httpx.get(f"{live.openai_base_url}/models").json()["data"]
    }
    assert models == {"vlm": "vlm", "ocr": "ocr", "q": "llm"}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "data:image/png;base64," + base64.b64encode(b"not an image").decode(),
            "not a readable image",
        ),
        ("data:image/png;base64,%%%", "not valid base64"),
        (png_data_url("red", size=(4000, 4000)), "limit"),
        ("http://127.0.0.1:9/x.png", "cannot fetch"),
        ("/etc/passwd", "local paths are off"),
    ],
)
def test_bad_images_get_400(live, url: str, message: str) -> None:
    r = httpx.post(
        f"{live.openai_base_url}/chat/completions",
        json={"model": "vlm", "messages": image_message(url), "max_tokens": 2},
        timeout=60,
    )
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "messages[0].content[0]"


def test_text_model_refuses_images(live) -> None:
    r = httpx.post(
        f"{live.openai_base_url}/chat/completions",
        json={"model": "q", "messages": image_message(png_data_url("red")), "max_tokens": 2},
    )
    assert r.status_code == 400


def test_without_the_vlm_extra_a_vision_model_says_what_to_install(
    live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An install without mlx-vlm (pip install omlx, no [vlm]): 501, naming the command."""
    monkeypatch.setitem(sys.modules, "mlx_vlm", None)  # as if it were not installed
    client = openai.OpenAI(base_url=live.openai_base_url, api_key="x", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="vlm", messages=image_message(png_data_url("red")), max_tokens=2
        )
    assert caught.value.status_code == 501
    error = caught.value.body
    assert error["code"] == "missing_extra"
    assert "pip install 'omlx[vlm]'" in error["message"] and "'vlm'" in error["message"]
    # Text models are served as before.
    text = client.chat.completions.create(
        model="q", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert text.choices[0].message.content is not None

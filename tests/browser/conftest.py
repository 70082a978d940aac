"""The admin in a real headless Chromium (Debian's package, driven by Playwright) against a
live `omlx serve` on loopback with the real default model (SmolLM2-135M-Instruct).

One server and one browser per module; each test gets a fresh browser context whose every
request is routed through `offsite`: a request for anything but this machine fails, and
the test fails with it (the admin must work with nothing reachable but the server).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from omlx.loadgen.server_process import free_port, server_process
from omlx.models.default_model import DEFAULT_MODEL_NAME
from tests.fixtures.fake_hub import FakeHub, FakeRepo
from tests.fixtures.tiny_encoders import minilm_dir
from tests.fixtures.tiny_vlm import build_tiny_qwen2_vl

CHROMIUM = os.environ.get("OMLX_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
API_KEY = "browser-test-key-4f1c"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
HUB_REPO = "tiny-org/tiny-hub-model"
EMBEDDER = "all-MiniLM-L6-v2"
VISION = "tiny-vlm"  # a tiny random qwen2_vl: it answers nonsense, but it sees the image


@dataclass
class Server:
    base_url: str
    home: Path
    log_path: Path
    hub: FakeHub

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"authorization": f"Bearer {API_KEY}"}, timeout=60
        )

    def status(self, model: str) -> dict:
        data = self.api().get("/v1/models/status").json()["data"]
        return next(m for m in data if m["id"] == model)

    def config(self) -> str:
        path = self.home / "config.toml"
        return path.read_text() if path.exists() else ""


@dataclass
class Offsite:
    """Requests that tried to leave the machine (each was aborted)."""

    urls: list[str] = field(default_factory=list)


def _hub_repo() -> FakeRepo:
    from safetensors.numpy import save

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "max_position_embeddings": 512}  # fmt: skip
    weights = save({"model.embed_tokens.weight": np.ones((256, 64), dtype=np.float32)})
    return FakeRepo({"config.json": json.dumps(config).encode(), "model.safetensors": weights,
                     "tokenizer.json": b'{"version": "1.0"}'})  # fmt: skip


@pytest.fixture(scope="module")
def server(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("admin-home")
    models = home / "models"
    models.mkdir()
    # The real default model, in the store under its usual name (a link: delete-safe).
    (models / DEFAULT_MODEL_NAME).symlink_to(smollm2_dir, target_is_directory=True)
    (models / EMBEDDER).symlink_to(minilm_dir(), target_is_directory=True)  # the real MiniLM
    build_tiny_qwen2_vl(models / VISION)
    port = free_port()
    log_path = home / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMLX_")}
    with FakeHub({HUB_REPO: _hub_repo()}) as hub:
        env.update(OMLX_HOME=str(home), HF_HOME=str(home / "hf"), HF_ENDPOINT=hub.url,
                   HF_HUB_DISABLE_TELEMETRY="1")  # fmt: skip
        env.pop("HF_HUB_OFFLINE", None)  # the stand-in hub answers on loopback
        cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--port", str(port),
               "--api-key", API_KEY, "--log-level", "INFO"]  # fmt: skip
        with server_process(cmd, port, env=env, log_path=log_path, ready_timeout_s=180) as url:
            yield Server(url, home, log_path, hub)
    log = log_path.read_text()
    assert API_KEY not in log  # never logged, not even by a failed login
    assert "Traceback" not in log, log[-4000:]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} is missing: run scripts/ensure_chromium.sh (or set OMLX_CHROMIUM)"
        if sys.platform == "linux" and shutil.which("apt-get"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import expect, sync_playwright

    # CI machines are small and shared: waits are generous (they bound a hang, they are
    # not speed assertions).
    expect.set_options(timeout=30_000)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield browser
        browser.close()


def _route_loopback_only(offsite: Offsite):
    def handle(route) -> None:
        host = urlsplit(route.request.url).hostname or ""
        if host in LOOPBACK:
            route.continue_()
        else:
            offsite.urls.append(route.request.url)
            route.abort()

    return handle


@pytest.fixture
def offsite() -> Offsite:
    return Offsite()


@pytest.fixture
def context(browser, offsite: Offsite) -> Iterator[object]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    ctx.route("**/*", _route_loopback_only(offsite))
    ctx.set_default_timeout(30_000)
    yield ctx
    ctx.close()
    assert offsite.urls == [], f"requests left the machine: {offsite.urls}"


@pytest.fixture
def page(context, server: Server):
    """A page logged in to the admin (the API key, as a person would type it)."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # The pages run under a strict Content-Security-Policy: anything it blocks is a bug.
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text
            else None)  # fmt: skip
    login(page, server.base_url)
    yield page
    assert errors == [], errors


def login(page, base_url: str, secret: str = API_KEY) -> None:
    page.goto(f"{base_url}/admin")
    page.fill("#secret", secret)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/admin")

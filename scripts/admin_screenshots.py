"""Screenshots of every admin page, light and dark, into docs/admin/ (the README shows them).

    python scripts/admin_screenshots.py [--out docs/admin]

Starts `omlx serve` with the default model in a scratch OMLX_HOME, puts some real work on
it (chat requests, a small benchmark) so the pages have something to show, then drives the
system Chromium through each page in both themes. Nothing but the local server is reached.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from omlx.loadgen.server_process import free_port, server_process  # noqa: E402
from tests.browser.conftest import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402

PAGES = ["dashboard", "models", "chat", "bench", "cache", "settings", "logs", "integrations"]
KEY = "screenshot-key"


def _load(base: str, stop: threading.Event) -> None:
    """Streams in a loop until `stop`, so the dashboard's charts and tables have data."""
    body = {"max_tokens": 48, "stream": True, "temperature": 0.8,
            "messages": [{"role": "user", "content": "Tell me about rivers."}]}  # fmt: skip
    headers = {"authorization": f"Bearer {KEY}"}
    while not stop.is_set():
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers,
                          timeout=120) as r:  # fmt: skip
            for _ in r.iter_lines():
                pass


def _prepare(base: str) -> None:
    headers = {"authorization": f"Bearer {KEY}"}
    client = httpx.Client(base_url=base, headers=headers, timeout=300)
    models = client.get("/v1/models").json()["data"]
    model = models[0]["id"]
    client.post(f"/admin/api/models/{model}/pin")
    job = client.post("/admin/api/bench", json={"model": model, "concurrency": [1, 2, 4],
                      "prompt_words": [32, 128], "max_tokens": 16}).json()  # fmt: skip
    while client.get(f"/admin/api/jobs/{job['id']}").json()["state"] == "running":
        time.sleep(1)


def _shoot(base: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    stop = threading.Event()
    loaders = [threading.Thread(target=_load, args=(base, stop)) for _ in range(3)]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        for scheme in ("light", "dark"):
            ctx = browser.new_context(viewport={"width": 1400, "height": 900},
                                      color_scheme=scheme, locale="en-US")  # fmt: skip
            ctx.route("**/*", lambda r: r.continue_() if "127.0.0.1" in r.request.url
                      else r.abort())  # fmt: skip
            page = ctx.new_page()
            page.goto(f"{base}/admin/login")
            page.screenshot(path=out / f"login-{scheme}.png")
            _shrink(out / f"login-{scheme}.png")
            page.fill("#secret", KEY)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/admin")
            if scheme == "light":
                for t in loaders:
                    t.start()
            for name in PAGES:
                page.goto(f"{base}/admin" if name == "dashboard" else f"{base}/admin/{name}")
                _stage(page, name, base)
                path = out / f"{name}-{scheme}.png"
                page.screenshot(path=path, full_page=name not in ("settings", "logs"))
                _shrink(path)
            ctx.close()
        browser.close()
    stop.set()
    for t in loaders:
        t.join()


def _shrink(path: Path) -> None:
    """256 colours without dithering: a UI screenshot stays sharp at a third of the size."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    image.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        path, optimize=True
    )


def _stage(page, name: str, base: str) -> None:
    if name == "dashboard":
        page.wait_for_function("() => Number(document.querySelector('#tile-running')"
                               ".textContent) >= 1", timeout=120_000)  # fmt: skip
        time.sleep(3)
    elif name == "chat":
        if not page.locator('.msg[data-role="assistant"]').count():
            page.fill("#temperature", "0")
            page.fill("#prompt", "Write a Python function that reverses a string, in a code "
                      "block, then explain it in one sentence.")  # fmt: skip
            page.click("#send")
        page.wait_for_selector(".reply-stats:has-text('tok/s')", timeout=180_000)
    elif name == "bench":
        page.locator("#bench-runs button").first.click()
        page.wait_for_selector("#bench-table tbody tr")
        time.sleep(0.5)
    else:
        time.sleep(1.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "admin")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OMLX_")}
        env.update(OMLX_HOME=home, HF_HUB_OFFLINE="1")
        port = free_port()
        cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--port", str(port),
               "--api-key", KEY]  # fmt: skip
        with server_process(cmd, port, env=env, log_path=Path(home) / "serve.log") as base:
            _prepare(base)
            _shoot(base, args.out)
    print(f"screenshots in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

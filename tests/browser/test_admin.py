"""The web admin, used as a person would: a real Chromium on a live `omlx serve`."""

from __future__ import annotations

import json
import re
import threading
import tomllib

import httpx
import pytest
from playwright.sync_api import expect

from omlx.models.default_model import DEFAULT_MODEL_NAME
from tests.browser.conftest import API_KEY, EMBEDDER, HUB_REPO, VISION, Server, login

pytestmark = [pytest.mark.realmodel, pytest.mark.slow, pytest.mark.timeout(600)]

MODEL = DEFAULT_MODEL_NAME


def _fetch(page, path: str, method: str = "GET", body=None, csrf: bool = True) -> dict:
    """fetch() from inside the page: the browser's own cookie, with or without the token."""
    return page.evaluate(
        """async ([path, method, body, csrf]) => {
            const headers = {"Content-Type": "application/json"};
            const token = document.querySelector('meta[name="csrf-token"]')?.content;
            if (csrf) headers["X-CSRF-Token"] = token;
            const payload = body === null ? undefined : JSON.stringify(body);
            const r = await fetch(path, {method, headers, body: payload});
            return {status: r.status, body: await r.text()};
        }""",
        [path, method, body, csrf],
    )


def test_login_csrf_and_logout(context, server: Server) -> None:
    page = context.new_page()
    page.goto(f"{server.base_url}/admin/models")
    expect(page).to_have_url(re.compile(r"/admin/login\?next="))
    page.fill("#secret", "not-the-key")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_be_visible()
    page.fill("#secret", API_KEY)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{server.base_url}/admin/models")  # back where it was going
    cookie = next(c for c in context.cookies() if c["name"] == "omlx_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert API_KEY not in page.content()
    change = {"key": "engine.max_queued", "value": "100"}
    refused = _fetch(page, "/admin/api/settings", "PUT", change, csrf=False)
    assert refused["status"] == 403 and "csrf" in refused["body"]
    # /v1 with the session cookie alone: no API key in the browser, ever.
    models = _fetch(page, "/v1/models", csrf=False)
    assert models["status"] == 200 and MODEL in models["body"]
    page.click("#logout")
    expect(page).to_have_url(re.compile(r"/admin/login"))
    assert _fetch(page, "/admin/api/history", csrf=False)["status"] == 401


def _stream_requests(server: Server, count: int, max_tokens: int) -> threading.Thread:
    def run() -> None:
        body = {
            "model": MODEL,
            "max_tokens": max_tokens,
            "temperature": 0.8,
            "stream": True,
            "messages": [{"role": "user", "content": "Tell me a long story about rivers."}],
        }

        def one(i: int) -> None:
            with server.api().stream("POST", "/v1/chat/completions", json=body) as r:
                for _ in r.iter_lines():
                    pass

        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_dashboard_numbers_and_charts_move_while_requests_run(page, server: Server) -> None:
    expect(page.locator("#conn-state")).to_have_text("Live")
    chart = page.locator("#chart-throughput")
    points_before = int(chart.get_attribute("data-points") or 0)
    requests_before = page.locator("#tile-requests").inner_text()
    load = _stream_requests(server, count=2, max_tokens=64)
    try:
        page.wait_for_function(
            "() => Number(document.querySelector('#tile-running').textContent) >= 1",
            timeout=60_000,
        )
        page.wait_for_function(
            "() => JSON.parse(document.querySelector('#chart-throughput').dataset.last || '{}')"
            ".generation_tps > 0",
            timeout=60_000,
        )
        expect(page.locator("#model-table tbody tr").first).to_contain_text(MODEL)
    finally:
        load.join(120)
    page.wait_for_function(
        f"() => document.querySelector('#tile-requests').textContent !== '{requests_before}'"
    )
    assert int(chart.get_attribute("data-points") or 0) > points_before
    # A reload keeps the last ten minutes: the server's history fills the charts at once.
    page.reload()
    page.wait_for_function(
        f"() => Number(document.querySelector('#chart-throughput').dataset.points)"
        f" > {points_before}"
    )


def test_models_page_load_unload_pin_show_in_pool_status(page, server: Server) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{server.base_url}/admin/models")
    row = page.locator(f'tr[data-model="{MODEL}"]')
    expect(row).to_be_visible()
    # however wide the table, every row's action buttons show inside its card
    edges = page.locator(".table-wrap").first.evaluate(
        """t => { const r = t.getBoundingClientRect();
                  return [...t.querySelectorAll('button[data-action]')]
                    .filter(b => b.offsetParent)
                    .map(b => { const x = b.getBoundingClientRect();
                                return x.left >= r.left && x.right <= r.right; }); }"""
    )
    assert edges and all(edges), edges
    if server.status(MODEL)["state"] != "available":
        expect(row.locator('[data-action="unload"]')).to_be_visible(timeout=120_000)
        row.locator('[data-action="unload"]').click()
        expect(row.locator(".state")).to_have_text("not loaded", timeout=60_000)
    assert server.status(MODEL)["state"] == "available"
    row.locator('[data-action="load"]').click()
    expect(row.locator(".state")).to_have_text("loaded", timeout=120_000)
    assert server.status(MODEL)["state"] == "loaded"
    row.locator('[data-action="pin"]').click()
    expect(row.locator('[data-action="unpin"]')).to_be_visible()
    assert server.status(MODEL)["pinned"] is True
    assert tomllib.loads(server.config())["models"]["pinned"] == [MODEL]  # kept for next start
    row.locator('[data-action="unpin"]').click()
    expect(row.locator('[data-action="pin"]')).to_be_visible()
    assert server.status(MODEL)["pinned"] is False
    row.get_by_role("button", name=f"Idle unload of {MODEL}").click()
    page.fill("#ttl-input", "900")
    page.locator("dialog[open] button[type=submit]").click()
    expect(row).to_contain_text("15 min")
    assert server.status(MODEL)["ttl_s"] == 900  # applied to the pool at once
    assert tomllib.loads(server.config())["models"]["ttl_overrides_s"] == {MODEL: 900}
    row.locator('[data-action="unload"]').click()
    expect(row.locator(".state")).to_have_text("not loaded", timeout=60_000)
    assert server.status(MODEL)["state"] == "available"


def test_models_page_imports_from_the_hub_with_progress_and_deletes(page, server: Server) -> None:
    page.goto(f"{server.base_url}/admin/models")
    page.fill("#import-source", HUB_REPO)
    page.click("#import-form button[type=submit]")
    job = page.locator("#import-jobs [data-state]").first
    expect(job).to_have_attribute("data-state", "done", timeout=60_000)
    name = HUB_REPO.split("/")[1]
    row = page.locator(f'tr[data-model="{name}"]')
    expect(row).to_be_visible()
    jobs = server.api().get("/admin/api/jobs?kind=import").json()
    detail = jobs[0]["detail"]
    size = sum(len(b) for b in server.hub.repos[HUB_REPO].files.values())
    assert detail["phase"] == "done" and detail["done"] == detail["total"] == size
    assert server.hub.gets("model.safetensors")  # fetched from the (stand-in) hub
    row.locator('[data-action="delete"]').click()
    expect(page.locator("dialog[open]")).to_contain_text(name)  # asks first
    page.click("#confirm-delete")
    expect(row).to_have_count(0)
    assert not (server.home / "models" / name).exists()


def test_chat_streams_a_reply_and_stop_frees_the_slot(page, server: Server) -> None:
    page.goto(f"{server.base_url}/admin/chat")
    expect(page.locator("#chat-model")).to_have_value(MODEL)
    page.fill("#max-tokens", "24")
    page.locator("#max-tokens").dispatch_event("change")
    page.fill("#prompt", "What is the capital of France?")
    page.click("#send")
    reply = page.locator('.msg[data-role="assistant"]').last
    expect(reply.locator(".reply-stats")).to_contain_text("tok/s", timeout=120_000)
    expect(reply.locator(".reply-stats")).to_contain_text("first token")
    assert reply.locator(".answer").inner_text().strip()
    # A long reply, stopped as soon as it streams: the server frees the slot.
    page.fill("#max-tokens", "4000")
    page.locator("#max-tokens").dispatch_event("change")
    page.fill("#prompt", "Write a very long essay about the history of bread.")
    page.click("#send")
    reply = page.locator('.msg[data-role="assistant"]').last
    page.wait_for_function(
        "() => document.querySelectorAll('.msg[data-role=assistant] .answer')[1]"
        "?.textContent.trim().length > 0",
        timeout=120_000,
    )
    assert server.api().get("/api/stats").json()["running"] == 1
    page.click("#stop")
    expect(reply.locator(".reply-stats")).to_contain_text("stopped")
    page.wait_for_function(
        """async () => (await (await fetch('/api/stats')).json()).running === 0""",
        polling=200,
        timeout=30_000,
    )
    # Conversations live in this browser: a reload shows both replies again.
    page.reload()
    expect(page.locator('.msg[data-role="assistant"]')).to_have_count(2)


def test_chat_sends_an_image_to_a_vision_model(page, server: Server, tmp_path) -> None:
    from PIL import Image

    image = tmp_path / "red.png"
    Image.new("RGB", (64, 48), "red").save(image)
    page.goto(f"{server.base_url}/admin/chat")
    page.click("#new-chat")
    attach = page.locator("label[for=image-input]")
    expect(attach).to_be_hidden()  # a text model takes no images
    page.select_option("#chat-model", VISION)
    expect(attach).to_be_visible()
    page.set_input_files("#image-input", str(image))
    expect(page.locator(".thumbs img")).to_have_count(1)
    page.fill("#max-tokens", "6")
    page.locator("#max-tokens").dispatch_event("change")
    page.fill("#prompt", "What colour is this?")
    with page.expect_request(lambda r: r.url.endswith("/v1/chat/completions")) as request:
        page.click("#send")
    [message] = json.loads(request.value.post_data)["messages"]
    parts = {p["type"]: p for p in message["content"]}
    assert parts["text"]["text"] == "What colour is this?"
    assert parts["image_url"]["image_url"]["url"].startswith("data:image/png;base64,")
    sent = page.locator('.msg[data-role="user"]').last
    expect(sent.locator("img.attached")).to_have_attribute("src", re.compile("^data:image/png"))
    reply = page.locator('.msg[data-role="assistant"]').last
    expect(reply.locator(".reply-stats")).to_contain_text("tokens", timeout=120_000)
    expect(reply.locator(".error-text")).to_be_hidden()
    log = server.log_path.read_text()
    assert re.search(rf"POST /v1/chat/completions model={VISION} status=200", log)


def test_embedding_and_rerank_playgrounds(page, server: Server) -> None:
    page.goto(f"{server.base_url}/admin/chat")
    page.click("#tab-embed")
    expect(page.locator("#embed-model")).to_have_value(EMBEDDER)

    def similarity(a: str, b: str) -> float:
        page.fill("#embed-a", a)
        page.fill("#embed-b", b)
        before = page.locator("#similarity").get_attribute("data-score")
        page.get_by_role("button", name="Compare").click()
        page.wait_for_function(
            "([before]) => { const s = document.querySelector('#similarity');"
            " return s.offsetParent && s.dataset.score && s.dataset.score !== before; }",
            arg=[before],
        )
        expect(page.locator("#similarity strong")).not_to_be_empty()
        return float(page.locator("#similarity").get_attribute("data-score") or "nan")

    close = similarity("A cat sits on the mat.", "A kitten is sitting on a rug.")
    far = similarity("A cat sits on the mat.", "Quarterly tax filings are due in April.")
    assert far < 0.3 < close <= 1  # MiniLM: a paraphrase is close, another topic far
    page.click("#tab-rerank")
    page.select_option("#rerank-model", MODEL)  # any chat model judges relevance yes/no
    page.fill("#rerank-query", "What is the capital of France?")
    page.fill("#rerank-docs", "Bananas are a yellow fruit.\nParis is the capital of France.")
    page.get_by_role("button", name="Rank").click()
    rows = page.locator("#rerank-results tbody tr")
    expect(rows).to_have_count(2, timeout=60_000)
    expect(rows.first).to_contain_text("Paris")


def test_bench_runs_end_to_end_and_exports(page, server: Server) -> None:
    page.goto(f"{server.base_url}/admin/bench")
    expect(page.locator("#bench-model")).to_have_value(MODEL)
    page.fill("#bench-conc", "1,2")
    page.fill("#bench-words", "16")
    page.fill("#bench-max", "8")
    page.click("#bench-run")
    expect(page.locator("#bench-table tbody tr")).to_have_count(2, timeout=180_000)
    expect(page.locator("#bench-runs tbody tr").first).to_contain_text(MODEL)
    assert int(page.locator("#bench-chart").get_attribute("data-points") or 0) == 2
    href = page.locator("#bench-export").get_attribute("href")
    exported = page.request.get(server.base_url + href)
    assert "attachment" in exported.headers["content-disposition"]
    run = json.loads(exported.text())
    assert [lv["concurrency"] for lv in run["levels"]] == [1, 2]
    assert all(lv["num_failed"] == 0 and lv["aggregate_tps"] > 0 for lv in run["levels"])
    assert (server.home / "bench" / f"{run['id']}.json").is_file()  # kept under OMLX_HOME


def test_settings_edit_lands_in_config_and_bad_value_shows_its_error(page, server) -> None:
    page.goto(f"{server.base_url}/admin/settings")
    field = page.locator("#setting-engine-max_queued")
    field.fill("100")
    page.locator('[data-key="engine.max_queued"] button[type=submit]').click()
    expect(page.locator('[data-key="engine.max_queued"] .pill.warn')).to_be_visible()
    assert tomllib.loads(server.config())["engine"]["max_queued"] == 100
    port = page.locator("#setting-server-port")
    port.fill("99999")
    page.locator('[data-key="server.port"] button[type=submit]').click()
    error = page.locator('[data-error-for="server.port"]')
    expect(error).to_contain_text("65535")
    assert "port" not in tomllib.loads(server.config()).get("server", {})
    secret = page.locator('[data-key="server.api_key"] input[type=password]')
    expect(secret).to_have_attribute("placeholder", re.compile("A value is set"))
    expect(secret).to_have_value("")
    assert API_KEY not in page.content()


def test_switching_language_changes_the_visible_strings(page, context, server) -> None:
    nav = page.locator("nav.sidebar a").first
    expect(nav).to_have_text("Dashboard")
    page.select_option("#lang-select", "ja")
    expect(nav).to_have_text("ダッシュボード")
    expect(page.locator("#conn-state")).to_have_text("ライブ")  # strings made in JavaScript too
    page.goto(f"{server.base_url}/admin/models")  # the choice is kept
    expect(page.locator("nav.sidebar a").nth(1)).to_have_text("モデル")
    page.select_option("#lang-select", "de")
    expect(page.locator("h1")).to_have_text("Modelle")
    page.select_option("#lang-select", "en")


def test_accept_language_picks_the_first_language_it_speaks(browser, server, offsite) -> None:
    from tests.browser.conftest import _route_loopback_only

    ctx = browser.new_context(locale="pt-BR", extra_http_headers={"Accept-Language": "nl, pt-BR"})
    ctx.route("**/*", _route_loopback_only(offsite))
    try:
        page = ctx.new_page()
        login(page, server.base_url)
        expect(page.locator("nav.sidebar a").first).to_have_text("Painel")
        assert page.evaluate("document.documentElement.lang") == "pt-BR"
    finally:
        ctx.close()
    assert offsite.urls == []


def test_cache_and_logs_pages(page, server: Server) -> None:
    page.goto(f"{server.base_url}/admin/cache")
    expect(page.locator("#cache-table tbody tr").first).to_contain_text(MODEL, timeout=30_000)
    page.click("#clear-hot")
    page.click("#cache-confirm")
    expect(page.locator(".toast").last).to_contain_text("blocks cleared")
    page.goto(f"{server.base_url}/admin/logs")
    expect(page.locator("#log-view")).to_contain_text("admin login from")
    page.select_option("#log-level", "WARNING")
    expect(page.locator("#log-view")).not_to_contain_text("admin login from 127.0.0.1\n")
    logs = httpx.get(f"{server.base_url}/admin/api/logs", headers={"x-api-key": API_KEY}).text
    assert "capital of France" not in logs  # prompt text never above DEBUG

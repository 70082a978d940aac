"""The admin dashboard's first paint on loopback, and what each admin page downloads.

Starts `omlx serve` (default model, scratch OMLX_HOME, open admin on 127.0.0.1), then
opens /admin in a fresh Chromium context several times (cold caches each time) and reads
the browser's own timings: first contentful paint, DOMContentLoaded, load. For every
page it sums the scripts, style sheets and fonts it fetched, as sent (gzip) and decoded.

    python benchmarks/admin_first_paint.py [--smoke] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from omlx.loadgen.server_process import emit_json_line, free_port, run_facts, server_process  # noqa: E402
from tests.browser.conftest import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PAGES = ["", "models", "chat", "bench", "cache", "settings", "logs", "integrations"]
TIMINGS = """() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const fcp = performance.getEntriesByName("first-contentful-paint")[0];
    return {fcp_ms: fcp ? fcp.startTime : null, dcl_ms: nav.domContentLoadedEventEnd,
            load_ms: nav.loadEventEnd};
}"""
WEIGHT = """() => {
    const kinds = {script: 0, style: 0, font: 0};
    const sent = {script: 0, style: 0, font: 0};
    for (const r of performance.getEntriesByType("resource")) {
        const ext = new URL(r.name).pathname.split(".").pop();
        const kind = ext === "js" ? "script" : ext === "css" ? "style"
            : ["woff", "woff2", "ttf", "otf"].includes(ext) ? "font" : null;
        if (!kind) continue;
        kinds[kind] += r.decodedBodySize;
        sent[kind] += r.encodedBodySize;
    }
    return {decoded: kinds, sent};
}"""


def measure(base: str, runs: int) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)

        def visit(path: str, read: str) -> dict:
            ctx = browser.new_context(viewport={"width": 1400, "height": 900})
            ctx.route("**/*", lambda r: r.continue_() if "127.0.0.1" in r.request.url
                      else r.abort())  # fmt: skip
            page = ctx.new_page()
            page.goto(f"{base}/admin/{path}".rstrip("/"), wait_until="load")
            page.wait_for_function("() => performance.getEntriesByName("
                                   "'first-contentful-paint').length > 0")  # fmt: skip
            result = page.evaluate(read)
            ctx.close()
            return result

        visit("", TIMINGS)  # warm the server's own caches (templates, static files)
        timings = [visit("", TIMINGS) for _ in range(runs)]
        weights = {p or "dashboard": visit(p, WEIGHT) for p in PAGES}
        browser.close()
    median = {k: statistics.median(t[k] for t in timings) for k in timings[0]}
    return {"runs": runs, "dashboard_median_ms": median,
            "dashboard_max_fcp_ms": max(t["fcp_ms"] for t in timings),
            "page_weight_bytes": weights}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="2 runs, no result file")
    args = parser.parse_args()
    runs = 2 if args.smoke else args.runs
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OMLX_")}
        env.update(OMLX_HOME=home, HF_HUB_OFFLINE="1")
        port = free_port()
        cmd = [sys.executable, "-m", "omlx.cli.main", "serve", "--port", str(port)]
        with server_process(cmd, port, env=env) as base:
            result = measure(base, runs)
    record = {"bench": "admin_first_paint", **run_facts(), **result,
              "command": "python benchmarks/admin_first_paint.py"}  # fmt: skip
    emit_json_line(record, None if args.smoke else RESULTS / "admin_first_paint.jsonl")
    print(json.dumps(result["dashboard_median_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

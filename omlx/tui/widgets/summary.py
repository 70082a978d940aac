"""The top panel: throughput sparkline, latency, cache and memory in a few lines."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

from omlx.schemas.stats import StatsSnapshot
from omlx.tui.format import human_bytes, ms, percent, rate
from omlx.tui.history import History


def _worst(snap: StatsSnapshot, attr: str, q: str) -> float | None:
    values = [getattr(getattr(m, attr), q) for m in snap.models]
    values = [v for v in values if v is not None]
    return max(values) if values else None


class Summary(Vertical):
    DEFAULT_CSS = """
    Summary { height: auto; padding: 0 1; }
    Summary #throughput { height: 1; }
    Summary Sparkline { height: 2; margin: 0 0; }
    Summary .line { height: 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static("generation - | prompt -", id="throughput", classes="line")
        yield Sparkline([0.0], id="spark")
        yield Static("requests -", id="requests", classes="line")
        yield Static("latency -", id="latency", classes="line")
        yield Static("cache -", id="cache", classes="line")
        yield Static("memory -", id="memory", classes="line")

    def show(self, snap: StatsSnapshot, history: History) -> None:
        peak = history.peak_generation()
        self.query_one("#throughput", Static).update(
            f"[b]generation[/b] {rate(snap.generation_tps)}  [b]prompt[/b] "
            f"{rate(snap.prompt_tps)}  (peak {peak:,.1f})"
        )
        self.query_one("#spark", Sparkline).data = list(history.generation) or [0.0]
        self.query_one("#requests", Static).update(
            f"[b]requests[/b] {snap.running} running, {snap.queued} queued, "
            f"{snap.requests_total} total"
        )
        self.query_one("#latency", Static).update(
            f"[b]TTFT[/b] p50 {ms(_worst(snap, 'ttft_ms', 'p50'))} "
            f"p99 {ms(_worst(snap, 'ttft_ms', 'p99'))}  [b]ITL[/b] p50 "
            f"{ms(_worst(snap, 'itl_ms', 'p50'))} p99 {ms(_worst(snap, 'itl_ms', 'p99'))}"
        )
        c = snap.cache
        self.query_one("#cache", Static).update(
            f"[b]cache[/b] {'on' if c.enabled else 'off'} hit "
            f"{percent(c.hits, c.hits + c.misses)} saved {c.hit_tokens} tok  hot "
            f"{human_bytes(c.hot.bytes)}  cold {human_bytes(c.cold.bytes)}"
        )
        m = snap.memory
        self.query_one("#memory", Static).update(
            f"[b]mem[/b] mlx {human_bytes(m.mlx_active_bytes)} peak "
            f"{human_bytes(m.mlx_peak_bytes)} cache {human_bytes(m.mlx_cache_bytes)} "
            f"rss {human_bytes(m.process_rss_bytes)} budget {human_bytes(m.budget_bytes)}"
        )

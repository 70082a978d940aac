// Dashboard: the stats stream (SSE, reconnecting) feeds the tiles, tables and charts; the
// charts start from the server's 10-minute history so a reload keeps them.
import { Alpine, api, cssVar, fmt, liveStream, start, t } from "./core.js";

const WINDOW_S = 600;
const EMPTY = {
  running: 0, queued: 0, prompt_tps: 0, generation_tps: 0, requests_total: 0, uptime_s: null,
  models: [], requests: [], version: "", blas: "",
  memory: { mlx_active_bytes: 0, mlx_peak_bytes: 0, mlx_cache_bytes: 0, process_rss_bytes: 0, budget_bytes: null },
  cache: { hit_tokens: 0, cold_hit_tokens: 0 },
};

// Mirrors omlx/server/admin/history.py point_of: the same series from a live snapshot.
function worst(models, field, q) {
  const values = models.map((m) => m[field]?.[q]).filter((v) => v != null);
  return values.length ? Math.max(...values) : null;
}
function pointOf(s) {
  return {
    running: s.running, queued: s.queued, prompt_tps: s.prompt_tps, generation_tps: s.generation_tps,
    ttft_p50_ms: worst(s.models, "ttft_ms", "p50"), ttft_p95_ms: worst(s.models, "ttft_ms", "p95"),
    itl_p50_ms: worst(s.models, "itl_ms", "p50"), itl_p95_ms: worst(s.models, "itl_ms", "p95"),
    mlx_active_bytes: s.memory.mlx_active_bytes, mlx_cache_bytes: s.memory.mlx_cache_bytes,
    process_rss_bytes: s.memory.process_rss_bytes, cache_hit_tokens: s.cache.hit_tokens,
  };
}

const CHARTS = [
  { id: "chart-throughput", series: [["generation_tps", "js.s.gen_tps", "--c1"], ["prompt_tps", "js.s.prompt_tps", "--c2"]], unit: "num" },
  { id: "chart-requests", series: [["running", "js.s.running", "--c1"], ["queued", "js.s.queued", "--c2"]], unit: "int" },
  { id: "chart-latency", series: [["ttft_p50_ms", "js.s.ttft_p50", "--c1"], ["ttft_p95_ms", "js.s.ttft_p95", "--c4"], ["itl_p50_ms", "js.s.itl_p50", "--c3", "ms2"], ["itl_p95_ms", "js.s.itl_p95", "--c5", "ms2"]], unit: "ms" },
  { id: "chart-memory", series: [["mlx_active_bytes", "js.s.mlx_active", "--c1"], ["mlx_cache_bytes", "js.s.mlx_cache", "--c3"], ["process_rss_bytes", "js.s.rss", "--c2"]], unit: "bytes" },
];

// Time series: x (epoch seconds) and one column per series key, bounded to WINDOW_S.
const columns = { time: [] };
for (const c of CHARTS) for (const [key] of c.series) columns[key] = [];

function append(time, point) {
  columns.time.push(time);
  for (const key of Object.keys(columns)) if (key !== "time") columns[key].push(point[key] ?? null);
  const cutoff = time - WINDOW_S;
  let drop = 0;
  while (drop < columns.time.length && columns.time[drop] < cutoff) drop++;
  if (drop) for (const key of Object.keys(columns)) columns[key].splice(0, drop);
}

const plots = [];
const clock = new Intl.DateTimeFormat(document.documentElement.lang || "en", { hour: "2-digit", minute: "2-digit", second: "2-digit" });
function buildCharts() {
  while (plots.length) plots.pop().destroy();
  const muted = cssVar("--muted"), grid = cssVar("--border");
  for (const c of CHARTS) {
    const el = document.getElementById(c.id);
    if (!el || !window.uPlot) continue;
    const fmtv = (v) => (v == null ? "–" : fmt[c.unit](v));
    const tick = (v) => (c.unit === "bytes" ? fmt.bytesShort(v) : c.unit === "ms" || !v ? fmt.num(v, 0) : fmt.num(v, v < 10 && c.unit !== "int" ? 1 : 0));
    const axis = (scale, side) => ({
      scale, side, stroke: muted, grid: { stroke: grid, width: 1, show: side !== 1 },
      ticks: { stroke: grid }, size: 56, values: (u, vals) => vals.map(tick),
    });
    const hasSecond = c.series.some((s) => s[3]);
    const opts = {
      width: Math.max(200, el.clientWidth), height: 190,
      scales: { x: { time: true } },
      series: [{ value: (u, v) => fmt.time(v) }, ...c.series.map(([, label, color, scale]) => ({
        label: t(label), stroke: cssVar(color), width: 1.6, scale: scale || "y",
        value: (u, v) => fmtv(v), spanGaps: false, points: { show: false },
      }))],
      axes: [{ stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, space: 90,
        values: (u, vals) => vals.map((v) => clock.format(v * 1000)) }, axis("y", 3),
        ...(hasSecond ? [axis("ms2", 1)] : [])],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
    };
    const data = [columns.time, ...c.series.map(([key]) => columns[key])];
    const plot = new window.uPlot(opts, data, el);
    plot.omlxKeys = c.series.map(([key]) => key);
    plots.push(plot);
  }
  redraw();
}

function redraw() {
  for (const plot of plots) {
    plot.setData([columns.time, ...plot.omlxKeys.map((k) => columns[k])]);
    const el = plot.root.parentElement;
    // What the browser tests (and anyone curious) read: how many points, the newest values.
    el.dataset.points = String(columns.time.length);
    el.dataset.last = JSON.stringify(Object.fromEntries(plot.omlxKeys.map((k) => [k, columns[k].at(-1) ?? null])));
  }
}

const conn = Alpine.reactive({ state: "connecting", retryS: 0 });

start({
  connection: () => ({
    get label() {
      if (conn.state === "live") return t("js.conn.live");
      if (conn.state === "reconnecting") return t("js.conn.retry", { s: conn.retryS });
      return t("js.conn.connecting");
    },
    get dotClass() { return conn.state === "live" ? "ok" : conn.state === "reconnecting" ? "bad" : "warn"; },
  }),
  dashboard: () => ({
    snap: EMPTY,
    async init() {
      try {
        const h = await api("/admin/api/history");
        h.time.forEach((time, i) => append(time, Object.fromEntries(Object.entries(h.series).map(([k, v]) => [k, v[i]]))));
      } catch (e) { /* no history yet: live points only */ }
      buildCharts();
      window.addEventListener("omlx-theme", buildCharts);
      matchMedia("(prefers-color-scheme: dark)").addEventListener("change", buildCharts);
      new ResizeObserver(() => {
        for (const plot of plots) plot.setSize({ width: Math.max(200, plot.root.parentElement.clientWidth), height: 190 });
      }).observe(document.getElementById("dashboard"));
      liveStream("/api/stats/stream", (s) => {
        this.snap = s;
        append(s.time, pointOf(s));
        redraw();
      }, (state, retryS) => { conn.state = state; conn.retryS = retryS || 0; });
    },
    get hotHits() { return Math.max(0, (this.snap.cache.hit_tokens || 0) - (this.snap.cache.cold_hit_tokens || 0)); },
    worst(field, q) { return worst(this.snap.models, field, q); },
    int(v) { return fmt.int(v); },
    num(v) { return fmt.num(v); },
    ms(v) { return fmt.ms(v); },
    bytes(v) { return fmt.bytes(v); },
    duration(v) { return fmt.duration(v); },
    pair(p) { return `${fmt.ms(p?.p50)} / ${fmt.ms(p?.p95)}`; },
    inOut(m) { return `${fmt.int(m.prompt_tokens_total)} / ${fmt.int(m.generation_tokens_total)}`; },
  }),
});

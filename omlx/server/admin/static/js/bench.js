// Benchmark: runs `omlx bench`'s load generator on the server, shows progress, results
// and a chart of aggregate tokens/s by concurrency (one line per prompt length).
import { api, cssVar, fmt, start, t, toast } from "./core.js";

const ints = (text) => String(text).split(",").map((s) => parseInt(s.trim(), 10)).filter((n) => Number.isFinite(n));
const COLORS = ["--c1", "--c2", "--c3", "--c4", "--c5"];

let plot = null;
function drawChart(levels) {
  const el = document.getElementById("bench-chart");
  if (!el || !window.uPlot) return;
  plot?.destroy();
  plot = null;
  const concs = [...new Set(levels.map((l) => l.concurrency))].sort((a, b) => a - b);
  const lengths = [...new Set(levels.map((l) => l.prompt_words))];
  if (!concs.length) return;
  const data = [concs, ...lengths.map((w) => concs.map((c) => levels.find((l) => l.concurrency === c && l.prompt_words === w)?.aggregate_tps ?? null))];
  const muted = cssVar("--muted"), grid = cssVar("--border");
  plot = new window.uPlot({
    width: Math.max(240, el.clientWidth), height: 220,
    scales: { x: { time: false } },
    series: [{ label: t("js.bench.concurrency") }, ...lengths.map((w, i) => ({
      label: t("js.bench.prompt_series", { n: w }), stroke: cssVar(COLORS[i % COLORS.length]), width: 2,
      points: { show: true, size: 6 }, value: (u, v) => fmt.num(v),
    }))],
    axes: [{ stroke: muted, grid: { stroke: grid }, splits: () => concs, values: (u, vals) => vals.map(String) },
      { stroke: muted, grid: { stroke: grid }, size: 56, values: (u, vals) => vals.map((v) => fmt.num(v, 0)) }],
  }, data, el);
  el.dataset.points = String(concs.length);
}

start({
  bench: () => ({
    models: [], runs: [], job: null, result: null, error: "",
    form: { model: "", concurrency: "1,2", prompt_words: "64", max_tokens: 32, requests: 0, dflash: false },

    async init() {
      try {
        this.models = (await api("/v1/models")).data.filter((m) => m.type === "llm" || m.type === "vlm");
        this.form.model = (this.models.find((m) => m.status === "loaded") || this.models[0])?.id || "";
      } catch (e) { toast(e.message, true); }
      await this.loadRuns();
      const running = (await api("/admin/api/jobs?kind=bench").catch(() => [])).find((j) => j.state === "running");
      if (running) { this.job = running; this.poll(); }
      window.addEventListener("omlx-theme", () => drawChart(this.levels));
    },
    get running() { return this.job?.state === "running"; },
    get levels() { return this.result?.levels || this.job?.detail?.levels || []; },

    async run() {
      this.error = "";
      const body = {
        model: this.form.model, concurrency: ints(this.form.concurrency), prompt_words: ints(this.form.prompt_words),
        max_tokens: Number(this.form.max_tokens), requests: Number(this.form.requests) || 0, dflash: !!this.form.dflash,
      };
      try {
        this.job = await api("/admin/api/bench", { method: "POST", body });
        this.result = null;
        this.poll();
      } catch (e) { this.error = e.message; }
    },
    async poll() {
      try { this.job = await api(`/admin/api/jobs/${this.job.id}`); } catch (e) { toast(e.message, true); return; }
      drawChart(this.levels);
      if (this.job.state === "running") { setTimeout(() => this.poll(), 500); return; }
      if (this.job.state === "done") { this.result = this.job.result; drawChart(this.levels); }
      if (this.job.error) this.error = this.job.error;
      await this.loadRuns();
    },
    async loadRuns() { try { this.runs = await api("/admin/api/bench/runs"); } catch (e) { this.runs = []; } },
    async show(r) {
      try { this.result = await api(`/admin/api/bench/runs/${r.id}`); this.$nextTick(() => drawChart(this.levels)); } catch (e) { toast(e.message, true); }
    },
    async removeRun(r) {
      try { this.runs = await api(`/admin/api/bench/runs/${r.id}`, { method: "DELETE" }); } catch (e) { toast(e.message, true); }
      if (this.result?.id === r.id) this.result = null;
    },

    get jobTitle() { return this.job?.title || ""; },
    get jobState() { return this.job ? t("js.job." + this.job.state) : ""; },
    get jobClass() { return this.job?.state === "done" ? "ok" : this.job?.state === "failed" ? "bad" : "warn"; },
    get jobProgress() { return this.job?.progress || 0; },
    get jobDetail() {
      const d = this.job?.detail || {};
      return d.requests ? t("js.bench.progress", { done: d.requests_done || 0, total: d.requests, level: this.job.message || "" }) : "";
    },
    get resultTitle() { return this.result ? `${this.result.model} · ${fmt.dateTime(this.result.started)}` : ""; },
    get exportHref() { return this.result ? `/admin/api/bench/runs/${this.result.id}?download=true` : "#"; },
    downloadHref(r) { return `/admin/api/bench/runs/${r.id}?download=true`; },
    removeLabel(r) { return t("js.bench.remove", { when: fmt.dateTime(r.started) }); },
    when(s) { return fmt.dateTime(s); },
    num(v) { return fmt.num(v); },
    int(v) { return fmt.int(v); },
    ms(v) { return fmt.ms(v); },
    sec(v) { return v == null ? "–" : fmt.ms(v * 1000); },
  }),
});

// Models: the store and the pool's state; load, unload, pin, TTL, delete, import.
import { api, fmt, start, t, toast } from "./core.js";

const POLL_MS = 2000;

start({
  models: () => ({
    models: [], budget: 0, used: 0, canImport: false, loaded: false, jobs: [], busy: {},
    form: { source: "", name: "", dtype: "float32" },
    pendingDelete: null, ttl: { id: "", value: "" },

    async init() {
      await this.refresh();
      await this.refreshJobs();
      setInterval(() => this.refresh(), POLL_MS);
    },
    async refresh() {
      try { this.apply(await api("/admin/api/models")); } catch (e) { toast(e.message, true); }
    },
    apply(view) {
      this.models = view.models; this.budget = view.budget_bytes; this.used = view.used_bytes;
      this.canImport = view.can_import; this.loaded = true;
    },
    async act(m, action, body) {
      this.busy = { ...this.busy, [m.id]: true };
      try {
        this.apply(await api(`/admin/api/models/${encodeURI(m.id)}/${action}`, { method: "POST", body }));
        toast(t("js.models.done_" + action, { name: m.id }));
      } catch (e) {
        toast(e.message, true);
      } finally {
        this.busy = { ...this.busy, [m.id]: false };
      }
    },
    isBusy(m) { return !!this.busy[m.id] || m.state === "loading"; },

    get budgetText() {
      return t("js.models.budget", { used: fmt.bytes(this.used), budget: fmt.bytes(this.budget), pct: fmt.pct(this.budget ? this.used / this.budget : 0) });
    },
    get budgetStyle() { return { width: `${Math.min(100, this.budget ? (100 * this.used) / this.budget : 0)}%` }; },
    get budgetClass() { const f = this.budget ? this.used / this.budget : 0; return f > 0.9 ? "bad" : f > 0.75 ? "warn" : ""; },

    stateLabel(m) { return t("js.state." + m.state); },
    stateClass(m) { return m.state === "loaded" ? "ok" : m.state === "loading" ? "warn" : ""; },
    inFlight(m) { return t("js.models.in_flight", { n: m.in_flight }); },
    memoryOf(m) { return m.state === "available" ? "–" : fmt.bytes(m.memory_bytes || m.estimated_bytes); },
    ttlText(m) {
      if (m.pinned) return t("js.models.ttl_pinned");
      if (!m.ttl_s) return t("js.models.ttl_never");
      const left = m.ttl_left_s != null && m.state === "loaded" ? " · " + t("js.models.ttl_left", { t: fmt.duration(m.ttl_left_s) }) : "";
      return fmt.duration(m.ttl_s) + left;
    },
    ttlLabel(m) { return t("js.models.ttl_edit", { name: m.id }); },
    count(n) {
      if (n == null) return "–";
      return new Intl.NumberFormat(document.documentElement.lang, { notation: "compact", maximumFractionDigits: 1 }).format(n);
    },
    bytes(v) { return fmt.bytes(v); },
    int(v) { return fmt.int(v); },

    openDelete(m) { this.pendingDelete = m; this.$refs.deleteDialog.showModal(); },
    closeDelete() { this.$refs.deleteDialog.close(); this.pendingDelete = null; },
    get deleteText() { return this.pendingDelete ? t("js.models.delete_confirm", { name: this.pendingDelete.id, path: this.pendingDelete.path || "" }) : ""; },
    async confirmDelete() {
      const m = this.pendingDelete;
      this.closeDelete();
      if (m) await this.act(m, "delete");
    },

    openTtl(m) { this.ttl = { id: m.id, value: m.ttl_s ?? "" }; this.$refs.ttlDialog.showModal(); },
    closeTtl() { this.$refs.ttlDialog.close(); },
    get ttlTitle() { return t("js.models.ttl_edit", { name: this.ttl.id }); },
    async saveTtl() {
      const value = this.ttl.value === "" ? null : Number(this.ttl.value);
      this.closeTtl();
      await this.act({ id: this.ttl.id }, "ttl", { ttl_s: value });
    },
    async resetTtl() { this.closeTtl(); await this.act({ id: this.ttl.id }, "ttl", { ttl_s: null }); },

    async startImport() {
      const body = { source: this.form.source.trim(), dtype: this.form.dtype };
      if (this.form.name.trim()) body.name = this.form.name.trim();
      try {
        await api("/admin/api/imports", { method: "POST", body });
        this.form.source = "";
        this.form.name = "";
        await this.refreshJobs();
      } catch (e) { toast(e.message, true); }
    },
    async refreshJobs() {
      try { this.jobs = await api("/admin/api/jobs?kind=import"); } catch (e) { return; }
      if (this.jobs.some((j) => j.state === "running")) {
        clearTimeout(this.jobTimer);
        this.jobTimer = setTimeout(() => this.refreshJobs().then(() => this.refresh()), 500);
      }
    },
    jobState(j) { return t("js.job." + j.state); },
    jobClass(j) { return j.state === "done" ? "ok" : j.state === "failed" ? "bad" : "warn"; },
    jobDetail(j) {
      const d = j.detail || {};
      if (j.state !== "running") return j.result?.name ? t("js.models.imported_as", { name: j.result.name }) : "";
      const phase = d.phase ? t("js.phase." + d.phase) : "";
      if (d.total && d.unit === "bytes") return `${phase} ${fmt.bytes(d.done)} / ${fmt.bytes(d.total)}`;
      if (d.total) return `${phase} ${fmt.int(d.done)} / ${fmt.int(d.total)}`;
      return `${phase} · ${fmt.duration(Date.now() / 1000 - j.started)}`;
    },
  }),
});

// Cache: the tiered KV cache's tiers, caps and per-model blocks; clear per tier and model.
import { ApiError, api, fmt, start, t, toast } from "./core.js";

start({
  cache: () => ({
    report: null, disabled: false, pending: null,
    async init() { await this.refresh(); setInterval(() => this.refresh(), 3000); },
    async refresh() {
      try { this.report = await api("/api/cache/stats"); this.disabled = !this.report.enabled; } catch (e) {
        if (e instanceof ApiError && e.status === 400) { this.disabled = true; this.report = null; } else toast(e.message, true);
      }
    },
    tierBytes(tier) { return (this.report?.models || []).reduce((n, m) => n + m[tier].bytes, 0); },
    tierBlocks(tier) { return (this.report?.models || []).reduce((n, m) => n + m[tier].blocks, 0); },
    cap(tier) { return tier === "hot" ? this.report?.hot_budget_bytes : this.report?.cold_cap_bytes; },
    tierText(tier) {
      return t("js.cache.tier", { blocks: fmt.int(this.tierBlocks(tier)), size: fmt.bytes(this.tierBytes(tier)), cap: fmt.bytes(this.cap(tier)) });
    },
    barStyle(tier) { const cap = this.cap(tier); return { width: `${cap ? Math.min(100, (100 * this.tierBytes(tier)) / cap) : 0}%` }; },
    get summary() {
      const r = this.report;
      return r ? t("js.cache.summary", { size: fmt.int(r.block_size), skipped: fmt.int(r.skipped_files) }) : "";
    },
    hits(m) { return `${fmt.int(m.hits)} / ${fmt.int(m.hits + m.misses)}`; },
    hitTokens(m) { return t("js.cache.hit_tokens", { hot: fmt.int(m.hit_tokens - m.cold_hit_tokens), cold: fmt.int(m.cold_hit_tokens) }); },
    int(v) { return fmt.int(v); },
    bytes(v) { return fmt.bytes(v); },
    pct(v) { return fmt.pct(v); },
    ask(tier, model) { this.pending = { tier, model }; this.$refs.confirm.showModal(); },
    cancel() { this.$refs.confirm.close(); this.pending = null; },
    get confirmText() {
      const p = this.pending;
      if (!p) return "";
      const tier = t("js.cache.tier_" + p.tier);
      return p.model ? t("js.cache.confirm_model", { tier, model: p.model.model }) : t("js.cache.confirm_all", { tier });
    },
    async clear() {
      const p = this.pending;
      this.cancel();
      if (!p) return;
      const q = new URLSearchParams({ tier: p.tier });
      if (p.model) q.set("model", p.model.fingerprint);
      try {
        const n = await api(`/api/cache/clear?${q}`, { method: "POST" });
        toast(t("js.cache.cleared", { n: fmt.int(n) }));
      } catch (e) { toast(e.message, true); }
      await this.refresh();
    },
  }),
});

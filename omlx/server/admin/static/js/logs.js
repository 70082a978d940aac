// Logs: the server's recent records with a level filter; follow mode polls for new ones.
import { api, fmt, start, t, toast } from "./core.js";

const MAX_SHOWN = 5000;

start({
  logs: () => ({
    records: [], last: 0, level: "INFO", follow: true, filter: "", serverLevel: "", timer: null,
    async init() { await this.reload(); this.toggleFollow(); },
    async reload() { this.records = []; this.last = 0; await this.fetchMore(); },
    async fetchMore() {
      try {
        const tail = await api(`/admin/api/logs?after=${this.last}&level=${this.level}`);
        this.serverLevel = tail.server_level;
        if (tail.records.length) this.records = [...this.records, ...tail.records].slice(-MAX_SHOWN);
        this.last = tail.last_seq;
        if (this.follow) requestAnimationFrame(() => { const v = this.$refs.view; v.scrollTop = v.scrollHeight; });
      } catch (e) { toast(e.message, true); }
    },
    toggleFollow() {
      clearInterval(this.timer);
      if (this.follow) this.timer = setInterval(() => this.fetchMore(), 1000);
    },
    get visible() {
      const f = this.filter.trim().toLowerCase();
      return f ? this.records.filter((r) => (r.message + " " + r.logger).toLowerCase().includes(f)) : this.records;
    },
    get serverLevelText() { return this.serverLevel ? t("js.logs.server_level", { level: this.serverLevel }) : ""; },
    levelClass(r) { return "lvl-" + r.level; },
    time(r) { return fmt.time(r.time); },
    reqId(r) { return r.request_id && r.request_id !== "-" ? `[${r.request_id}]` : ""; },
  }),
});

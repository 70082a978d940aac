// Settings: every key of the settings object; edits are validated by the server with the
// rules of `omlx config set` and written to config.toml; errors show under the field.
import { api, start, t, toast } from "./core.js";

const show = (v) => (v !== null && typeof v === "object" ? JSON.stringify(v) : String(v ?? ""));

start({
  settings: () => ({
    rows: [], configFile: "", drafts: {}, errors: {}, password: { a: "", b: "" },
    async init() {
      try {
        const view = await api("/admin/api/settings");
        this.configFile = view.config_file;
        this.rows = view.rows;
        for (const r of this.rows) if (!r.is_secret) this.drafts[r.key] = show(r.value);
        if (location.hash) requestAnimationFrame(() => document.querySelector(location.hash)?.scrollIntoView());
      } catch (e) { toast(e.message, true); }
    },
    get sections() {
      const out = [];
      for (const r of this.rows) {
        let s = out.find((x) => x.name === r.section);
        if (!s) out.push((s = { name: r.section, rows: [] }));
        s.rows.push(r);
      }
      return out;
    },
    sectionId(s) { return "section-" + s.name; },
    sectionHref(s) { return "#section-" + s.name; },
    inputId(r) { return "setting-" + r.key.replace(".", "-"); },
    isText(r) { return !r.is_secret && !["bool", "choice"].includes(r.kind); },
    inputType(r) { return r.kind === "int" || r.kind === "float" ? "number" : "text"; },
    sourceLabel(r) { return t("js.source." + r.source); },
    liveLabel(r) { return r.live ? t("js.settings.live") : t("js.settings.restart"); },
    liveClass(r) { return r.live ? "ok" : ""; },
    overridden(r) { return r.source === "env" || r.source === "cli"; },
    overrideText(r) { return r.source === "env" ? t("js.settings.env_override", { env: r.env_var }) : t("js.settings.cli_override"); },
    secretPlaceholder(r) { return r.is_set ? t("js.settings.secret_set") : t("js.settings.secret_unset"); },
    fileText(r) { return t("js.settings.file_value", { value: show(r.file_value) }); },

    async save(row, value) {
      this.errors = { ...this.errors, [row.key]: "" };
      try {
        const updated = await api("/admin/api/settings", { method: "PUT", body: { key: row.key, value } });
        Object.assign(row, updated);
        if (!row.is_secret) this.drafts[row.key] = show(row.value);
        else this.drafts[row.key] = "";
        toast(updated.live ? t("js.settings.saved_live", { key: row.key }) : t("js.settings.saved_restart", { key: row.key }));
      } catch (e) {
        this.errors = { ...this.errors, [row.key]: e.message };
      }
    },
    saveText(row) { return this.save(row, this.drafts[row.key] ?? ""); },
    saveBool(row, e) { return this.save(row, e.target.checked ? "true" : "false"); },
    saveChoice(row, e) { return this.save(row, e.target.value); },
    async savePassword() {
      const key = "admin.password_hash";
      if (this.password.a !== this.password.b) { this.errors = { ...this.errors, [key]: t("js.settings.password_mismatch") }; return; }
      await this.sendPassword(this.password.a);
    },
    removePassword() { return this.sendPassword(""); },
    async sendPassword(password) {
      const key = "admin.password_hash";
      this.errors = { ...this.errors, [key]: "" };
      try {
        const updated = await api("/admin/api/settings/password", { method: "POST", body: { password } });
        Object.assign(this.rows.find((r) => r.key === key), updated);
        this.password = { a: "", b: "" };
        toast(t(password ? "js.settings.password_set" : "js.settings.password_removed"));
      } catch (e) { this.errors = { ...this.errors, [key]: e.message }; }
    },
  }),
});

// Integrations: endpoint URLs and the `omlx launch TOOL` command of each agent tool.
import { start, t, toast } from "./core.js";

start({
  integrations: () => ({
    get openaiUrl() { return `${location.origin}/v1`; },
    get anthropicUrl() { return location.origin; },
    async copyText(text) {
      try { await navigator.clipboard.writeText(text); toast(t("js.copied", { text })); } catch (e) { toast(text); }
    },
    copy(e) { return this.copyText(e.currentTarget.dataset.copy); },
  }),
});

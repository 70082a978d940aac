// Chat with any text or vision model, streamed from /v1/chat/completions with the session
// cookie; conversations live in this browser (localStorage). Also two small playgrounds:
// embedding similarity and rerank.
import { Alpine, api, csrfToken, fmt, start, t, toast } from "./core.js";
import { render, safeHtmlDirective } from "./markdown.js";

Alpine.directive("safe-html", safeHtmlDirective);

const STORE_KEY = "omlx.chat.v1";
const DEFAULT_PARAMS = { temperature: 0.7, top_p: 1, max_tokens: 1024, seed: "" };

function loadStore() {
  try {
    const data = JSON.parse(localStorage.getItem(STORE_KEY) || "{}");
    return { conversations: data.conversations || [], currentId: data.currentId || null, params: { ...DEFAULT_PARAMS, ...(data.params || {}) } };
  } catch (e) {
    return { conversations: [], currentId: null, params: { ...DEFAULT_PARAMS } };
  }
}

const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 6);
const blank = (model) => ({ id: newId(), title: t("js.chat.untitled"), model: model || "", system: "", messages: [], updated: Date.now() });

function apiMessages(conv) {
  const out = conv.system.trim() ? [{ role: "system", content: conv.system }] : [];
  for (const m of conv.messages) {
    if (m.role === "user") {
      const images = m.images || [];
      out.push({ role: "user", content: images.length
        ? [{ type: "text", text: m.content }, ...images.map((url) => ({ type: "image_url", image_url: { url } }))]
        : m.content });
    } else if (m.role === "assistant" && !m.error && (m.content || m.tool_calls?.length)) {
      const msg = { role: "assistant", content: m.content };
      if (m.tool_calls?.length) msg.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
      out.push(msg);
    }
  }
  return out;
}

// Server-sent events from a fetch body: calls onData(parsed JSON) per `data:` line.
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, cut).trim();
      buffer = buffer.slice(cut + 1);
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") return;
      onData(JSON.parse(data));
    }
  }
}

start({
  chat: () => ({
    tab: "chat", allModels: [], conversations: [], currentId: null, params: { ...DEFAULT_PARAMS },
    draft: "", images: [], streaming: false, controller: null,
    embed: { model: "", a: "", b: "", score: null, error: "" },
    rerank: { model: "", query: "", docs: "", results: [], error: "" },

    async init() {
      const stored = loadStore();
      this.conversations = stored.conversations;
      this.params = stored.params;
      try { this.allModels = (await api("/v1/models")).data; } catch (e) { toast(e.message, true); }
      const fallback = this.defaultModel();
      if (!this.conversations.length) this.conversations.push(blank(fallback));
      this.currentId = this.conversations.some((c) => c.id === stored.currentId) ? stored.currentId : this.conversations[0].id;
      if (!this.current.model) this.current.model = fallback;
      for (const c of this.conversations) for (const m of c.messages) if (m.role === "assistant") m.html = render(m.content);
      this.embed.model = this.embedModels[0]?.id || "";
      this.rerank.model = this.rerankModels[0]?.id || "";
    },
    defaultModel() {
      const chat = this.chatModels;
      return (chat.find((m) => m.status === "loaded") || chat[0])?.id || "";
    },
    get chatModels() { return this.allModels.filter((m) => m.type === "llm" || m.type === "vlm"); },
    get embedModels() { return this.allModels.filter((m) => m.type === "embedding"); },
    get rerankModels() { return this.allModels.filter((m) => m.type === "reranker" || m.type === "llm"); },
    modelLabel(m) { return m.status === "loaded" ? `${m.id} · ${t("js.state.loaded")}` : m.id; },
    get current() { return this.conversations.find((c) => c.id === this.currentId) || this.conversations[0] || blank(""); },
    get isVision() { return this.allModels.find((m) => m.id === this.current.model)?.type === "vlm"; },
    get canSend() { return !!this.current.model && (this.draft.trim().length > 0 || this.images.length > 0); },

    setTab(name) { this.tab = name; },
    tabSelected(name) { return this.tab === name ? "true" : "false"; },
    tabClass(name) { return this.tab === name ? "active" : ""; },
    isCurrent(c) { return c.id === this.currentId ? "true" : "false"; },
    removeLabel(c) { return t("js.chat.remove", { title: c.title }); },

    save() {
      const strip = (c) => ({ ...c, messages: c.messages.map(({ html, ...rest }) => rest) });
      const data = { conversations: this.conversations.map(strip), currentId: this.currentId, params: this.params };
      try { localStorage.setItem(STORE_KEY, JSON.stringify(data)); } catch (e) { toast(t("js.chat.storage_full"), true); }
    },
    saveParams() { this.save(); },
    newConversation() {
      const c = blank(this.current.model || this.defaultModel());
      this.conversations.unshift(c);
      this.currentId = c.id;
      this.save();
    },
    select(c) { this.currentId = c.id; this.save(); },
    remove(c) {
      this.conversations = this.conversations.filter((x) => x.id !== c.id);
      if (!this.conversations.length) this.conversations.push(blank(this.defaultModel()));
      if (this.currentId === c.id) this.currentId = this.conversations[0].id;
      this.save();
    },

    enterKey(e) { if (!e.shiftKey && !e.isComposing) { e.preventDefault(); if (this.canSend && !this.streaming) this.send(); } },
    attach(e) {
      for (const file of e.target.files) {
        const reader = new FileReader();
        reader.onload = () => this.images.push(reader.result);
        reader.readAsDataURL(file);
      }
      e.target.value = "";
    },

    async send() {
      const conv = this.current;
      const text = this.draft.trim();
      conv.messages.push({ role: "user", content: text, images: [...this.images] });
      if (conv.messages.length === 1) conv.title = (text || t("js.chat.image")).slice(0, 48);
      conv.messages.push({ role: "assistant", content: "", reasoning: "", tool_calls: [], html: "", stats: null, error: "" });
      const reply = conv.messages[conv.messages.length - 1];
      this.draft = "";
      this.images = [];
      conv.updated = Date.now();
      this.scroll();
      await this.stream(conv, reply);
      this.save();
    },

    async stream(conv, reply) {
      const p = this.params;
      const body = {
        model: conv.model, messages: apiMessages({ ...conv, messages: conv.messages.slice(0, -1) }),
        stream: true, stream_options: { include_usage: true },
        temperature: Number(p.temperature), top_p: Number(p.top_p), max_tokens: Number(p.max_tokens) || undefined,
      };
      if (p.seed !== "" && p.seed != null) body.seed = Number(p.seed);
      this.controller = new AbortController();
      this.streaming = true;
      const started = performance.now();
      let first = null, frame = 0, usage = null;
      const calls = [];
      const paint = () => { frame = 0; reply.html = render(reply.content); this.scroll(); };
      try {
        const response = await fetch("/v1/chat/completions", {
          method: "POST", credentials: "same-origin", signal: this.controller.signal,
          headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken() },
          body: JSON.stringify(body),
        });
        if (!response.ok) {
          const data = await response.json().catch(() => null);
          throw new Error(data?.error?.message || `HTTP ${response.status}`);
        }
        await readEvents(response, (chunk) => {
          if (chunk.error) throw new Error(chunk.error.message || "error");
          if (chunk.usage) usage = chunk.usage;
          const delta = chunk.choices?.[0]?.delta;
          if (!delta) return;
          if ((delta.content || delta.reasoning_content || delta.tool_calls) && first === null) first = performance.now();
          if (delta.reasoning_content) reply.reasoning += delta.reasoning_content;
          if (delta.content) reply.content += delta.content;
          for (const tc of delta.tool_calls || []) {
            const slot = (calls[tc.index ?? 0] ||= { id: "", name: "", arguments: "" });
            if (tc.id) slot.id = tc.id;
            if (tc.function?.name) slot.name += tc.function.name;
            if (tc.function?.arguments) slot.arguments += tc.function.arguments;
            reply.tool_calls = calls.map((c) => ({ ...c }));
          }
          if (!frame) frame = requestAnimationFrame(paint);
        });
      } catch (e) {
        if (e.name === "AbortError") reply.stopped = true;
        else reply.error = e.message;
      } finally {
        const end = performance.now();
        const tokens = usage?.completion_tokens ?? null;
        reply.stats = {
          ttft_ms: first === null ? null : first - started,
          tokens,
          tps: tokens && first !== null && end > first ? (Math.max(tokens - 1, 1) * 1000) / (end - first) : null,
          stopped: !!reply.stopped,
        };
        if (frame) cancelAnimationFrame(frame);
        paint();
        this.streaming = false;
        this.controller = null;
      }
    },
    stop() { this.controller?.abort(); },
    statsText(m) {
      const s = m.stats;
      if (!s) return this.streaming ? t("js.chat.generating") : "";
      const parts = [];
      if (s.ttft_ms != null) parts.push(t("js.chat.ttft", { ms: fmt.num(s.ttft_ms, 0) }));
      if (s.tps != null) parts.push(t("js.chat.tps", { tps: fmt.num(s.tps, 1) }));
      if (s.tokens != null) parts.push(t("js.chat.tokens", { n: fmt.int(s.tokens) }));
      if (s.stopped) parts.push(t("js.chat.stopped"));
      return parts.join(" · ");
    },
    scroll() {
      requestAnimationFrame(() => { const el = this.$refs.messages; if (el) el.scrollTop = el.scrollHeight; });
    },

    async compare() {
      this.embed.error = "";
      this.embed.score = null;
      try {
        const r = await api("/v1/embeddings", { method: "POST", body: { model: this.embed.model, input: [this.embed.a, this.embed.b] } });
        const [a, b] = r.data.map((d) => d.embedding);
        let dot = 0, na = 0, nb = 0;
        for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
        this.embed.score = dot / (Math.sqrt(na) * Math.sqrt(nb) || 1);
      } catch (e) { this.embed.error = e.message; }
    },
    get scoreText() { return this.embed.score === null ? "" : fmt.num(this.embed.score, 3); },
    async runRerank() {
      this.rerank.error = "";
      const documents = this.rerank.docs.split("\n").map((s) => s.trim()).filter(Boolean);
      try {
        const r = await api("/v1/rerank", { method: "POST", body: { model: this.rerank.model, query: this.rerank.query, documents } });
        this.rerank.results = r.results.map((x) => ({ ...x, text: documents[x.index] }))
          .sort((a, b) => b.relevance_score - a.relevance_score);
      } catch (e) { this.rerank.error = e.message; this.rerank.results = []; }
    },
    score(v) { return fmt.num(v, 3); },
  }),
});

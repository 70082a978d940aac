// Shared by every admin page: translations, formatting, the JSON helper, live streams,
// the top bar (language, theme, logout). Plain ES module, no build step.
import Alpine from "../vendor/alpine-csp.esm.min.js";

const strings = JSON.parse(document.getElementById("omlx-i18n")?.textContent || "{}");
export const lang = document.documentElement.lang || "en";

// t(key, {n: 3}) for a "js.*" key: the page's language, English already merged in by the server.
export function t(key, vars) {
  const text = strings[key] ?? key;
  return vars ? text.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m)) : text;
}

export const csrfToken = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

export class ApiError extends Error {
  constructor(message, status, param) {
    super(message);
    this.status = status;
    this.param = param;
  }
}

// JSON over fetch with the session cookie; state-changing calls carry the CSRF token.
export async function api(path, { method = "GET", body, signal, raw = false } = {}) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrfToken();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, signal, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (raw && response.ok) return response;
  if (response.status === 401 && path.startsWith("/admin/")) {
    location.href = "/admin/login?next=" + encodeURIComponent(location.pathname);
  }
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const err = data?.error;
    throw new ApiError(err?.message || `HTTP ${response.status}`, response.status, err?.param);
  }
  return data;
}

// -- numbers, sizes, times, in the page's language --------------------------------------
const numberFormats = new Map();
function nf(digits) {
  if (!numberFormats.has(digits)) {
    numberFormats.set(digits, new Intl.NumberFormat(lang, { maximumFractionDigits: digits, minimumFractionDigits: digits }));
  }
  return numberFormats.get(digits);
}
export const fmt = {
  num(v, digits = 1) { return v == null || Number.isNaN(v) ? "–" : nf(digits).format(v); },
  int(v) { return v == null ? "–" : nf(0).format(v); },
  ms(v) { return v == null ? "–" : nf(v < 10 ? 1 : 0).format(v) + " ms"; },
  bytes(v) {
    if (v == null) return "–";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return nf(i === 0 ? 0 : 1).format(v) + " " + units[i];
  },
  bytesShort(v) {
    if (v == null) return "";
    const units = ["B", "K", "M", "G", "T"];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return nf(v < 10 && i ? 1 : 0).format(v) + units[i];
  },
  pct(v) { return v == null ? "–" : new Intl.NumberFormat(lang, { style: "percent", maximumFractionDigits: 1 }).format(v); },
  duration(s) {
    if (s == null) return "–";
    s = Math.max(0, Math.round(s));
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    if (d) return t("js.dur.dh", { d, h });
    if (h) return t("js.dur.hm", { h, m });
    if (m) return t("js.dur.ms", { m, s: s % 60 });
    return t("js.dur.s", { s });
  },
  dateTime(epochS) {
    return epochS == null ? "–" : new Intl.DateTimeFormat(lang, { dateStyle: "medium", timeStyle: "medium" }).format(new Date(epochS * 1000));
  },
  time(epochS) {
    return epochS == null ? "–" : new Intl.DateTimeFormat(lang, { timeStyle: "medium" }).format(new Date(epochS * 1000));
  },
};

export function toast(message, bad = false) {
  const box = document.getElementById("toasts");
  if (!box) return;
  const el = document.createElement("div");
  el.className = "toast" + (bad ? " bad" : "");
  el.textContent = message;
  box.append(el);
  setTimeout(() => el.remove(), bad ? 8000 : 4000);
}

// An SSE stream that reconnects with exponential backoff (1 s doubling to 30 s).
export function liveStream(url, onData, onState) {
  let source = null, delay = 1000, timer = null, closed = false;
  const open = () => {
    source = new EventSource(url, { withCredentials: true });
    source.onopen = () => { delay = 1000; onState("live"); };
    source.onmessage = (e) => onData(JSON.parse(e.data));
    source.onerror = () => {
      source.close();
      if (closed) return;
      onState("reconnecting", delay / 1000);
      timer = setTimeout(open, delay);
      delay = Math.min(delay * 2, 30000);
    };
  };
  open();
  return () => { closed = true; clearTimeout(timer); source?.close(); };
}

export function setCookie(name, value) {
  document.cookie = `${name}=${encodeURIComponent(value)}; path=/; max-age=31536000; SameSite=Strict`;
}

// Chart colours come from the theme's CSS variables.
export function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function initTopbar() {
  document.getElementById("lang-select")?.addEventListener("change", (e) => {
    setCookie("omlx_lang", e.target.value);
    location.reload();
  });
  document.getElementById("theme-select")?.addEventListener("change", (e) => {
    setCookie("omlx_theme", e.target.value);
    document.documentElement.dataset.theme = e.target.value;
    window.dispatchEvent(new Event("omlx-theme"));
  });
  // The button is rendered disabled: a click before this module runs would do nothing.
  const logout = document.getElementById("logout");
  logout?.addEventListener("click", async () => {
    try { await api("/admin/logout", { method: "POST" }); } finally { location.href = "/admin/login"; }
  });
  if (logout) logout.disabled = false;
}

// Register the page's Alpine component(s) and start Alpine once.
export function start(components = {}) {
  for (const [name, factory] of Object.entries(components)) Alpine.data(name, factory);
  Alpine.start();
}

initTopbar();
export { Alpine };

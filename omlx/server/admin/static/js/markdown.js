// Markdown for chat replies: marked renders, highlight.js colours code, DOMPurify
// sanitizes the result (model output is untrusted). Images other than data: URLs are
// dropped, so a reply cannot make the browser fetch anything.
import { Marked } from "../vendor/marked.esm.js";
import hljs from "../vendor/hljs/core.min.js";
import bash from "../vendor/hljs/languages/bash.min.js";
import c from "../vendor/hljs/languages/c.min.js";
import cpp from "../vendor/hljs/languages/cpp.min.js";
import css from "../vendor/hljs/languages/css.min.js";
import diff from "../vendor/hljs/languages/diff.min.js";
import go from "../vendor/hljs/languages/go.min.js";
import java from "../vendor/hljs/languages/java.min.js";
import javascript from "../vendor/hljs/languages/javascript.min.js";
import json from "../vendor/hljs/languages/json.min.js";
import markdown from "../vendor/hljs/languages/markdown.min.js";
import plaintext from "../vendor/hljs/languages/plaintext.min.js";
import python from "../vendor/hljs/languages/python.min.js";
import rust from "../vendor/hljs/languages/rust.min.js";
import shell from "../vendor/hljs/languages/shell.min.js";
import sql from "../vendor/hljs/languages/sql.min.js";
import typescript from "../vendor/hljs/languages/typescript.min.js";
import xml from "../vendor/hljs/languages/xml.min.js";
import yaml from "../vendor/hljs/languages/yaml.min.js";

const languages = { bash, c, cpp, css, diff, go, java, javascript, json, markdown, plaintext,
  python, rust, shell, sql, typescript, xml, yaml };
for (const [name, grammar] of Object.entries(languages)) hljs.registerLanguage(name, grammar);

const escape = (s) => s.replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]);

const marked = new Marked({ gfm: true, breaks: true });
marked.use({
  renderer: {
    code({ text, lang }) {
      const language = (lang || "").split(/\s/)[0].toLowerCase();
      const body = hljs.getLanguage(language)
        ? hljs.highlight(text, { language, ignoreIllegals: true }).value
        : escape(text);
      const cls = hljs.getLanguage(language) ? ` class="hljs language-${escape(language)}"` : "";
      return `<pre><code${cls}>${body}</code></pre>\n`;
    },
  },
});

let hooked = false;
function purify(html) {
  const purifier = window.DOMPurify;
  if (!hooked) {
    purifier.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
      if (node.tagName === "IMG" && !(node.getAttribute("src") || "").startsWith("data:image/")) node.remove();
    });
    hooked = true;
  }
  return purifier.sanitize(html, { FORBID_TAGS: ["style", "form", "input", "button"], FORBID_ATTR: ["style"] });
}

export function render(text) {
  return purify(marked.parse(text || ""));
}

// x-safe-html="expr": the CSP build of Alpine has no x-html; this directive puts HTML in
// place only after DOMPurify has cleaned it (again), so nothing unsanitized gets in.
export function safeHtmlDirective(el, { expression }, { effect, evaluateLater }) {
  const value = evaluateLater(expression);
  effect(() => value((html) => { el.innerHTML = purify(html || ""); }));
}

// Markdown -> safe DOM. Answers come from a model (which a prompt can steer), so everything marked
// produces goes through DOMPurify before it touches the page, and links are forced to be inert
// outside http(s)/mailto. Images are never loaded: a model-written image URL is a classic way to
// leak a conversation to a third party, so they render as plain links instead.
import { Marked } from "marked";
import DOMPurify from "dompurify";
import hljs from "highlight.js";

const SAFE_URL = /^(https?:|mailto:|#|\/(?!\/))/i;
const LANG = /^[\w+#.-]{1,32}$/;

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    code({ text, lang }) {
      const name = (lang || "").trim().split(/\s+/)[0];
      const known = LANG.test(name) && hljs.getLanguage(name);
      // hljs escapes the code itself; the whole result is sanitized below anyway.
      const body = known ? hljs.highlight(text, { language: name, ignoreIllegals: true }).value : escapeHtml(text);
      const cls = known ? ` class="hljs language-${name}"` : ' class="hljs"';
      return `<pre><code${cls}>${body}</code></pre>\n`;
    },
    image({ href, text }) {
      return `<a href="${escapeHtml(href || "")}">${escapeHtml(text || "image")}</a>`;
    },
    checkbox({ checked }) {
      return checked ? "☑ " : "☐ ";
    },
  },
});

const ALLOWED_TAGS = [
  "a", "b", "blockquote", "br", "code", "del", "details", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
  "i", "kbd", "li", "mark", "ol", "p", "pre", "s", "span", "strong", "sub", "summary", "sup", "table",
  "tbody", "td", "th", "thead", "tr", "u", "ul",
];
const ALLOWED_ATTR = ["href", "title", "class", "align", "start", "colspan", "rowspan"];

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName !== "A") return;
  const href = node.getAttribute("href");
  if (href === null || !SAFE_URL.test(href.trim())) {
    node.removeAttribute("href"); // javascript:, data:, vbscript:, protocol-relative...
    return;
  }
  node.setAttribute("target", "_blank");
  node.setAttribute("rel", "noopener noreferrer");
});

/** Sanitized HTML for `text`, as a DocumentFragment ready to insert. */
export function renderMarkdown(text) {
  const html = marked.parse(text || "");
  return DOMPurify.sanitize(html, {
    ALLOWED_TAGS, ALLOWED_ATTR, ADD_ATTR: ["target"], RETURN_DOM_FRAGMENT: true,
  });
}

/** Wrap each code block in a header with its language and a copy button (built as DOM, not HTML). */
export function decorateCodeBlocks(root, copy) {
  for (const pre of root.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    const match = code && /language-([\w+#.-]+)/.exec(code.className);
    const wrap = document.createElement("div");
    wrap.className = "code-block";
    const head = document.createElement("div");
    head.className = "code-head";
    const label = document.createElement("span");
    label.textContent = match ? match[1] : "code";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "code-copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", `Copy ${label.textContent} code`);
    button.addEventListener("click", () => copy((code || pre).textContent, button));
    head.append(label, button);
    pre.replaceWith(wrap);
    wrap.append(head, pre);
  }
}

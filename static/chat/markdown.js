// Markdown -> safe DOM. Answers come from a model (which a prompt can steer), so everything marked
// produces goes through DOMPurify before it touches the page, and links are forced to be inert
// outside http(s)/mailto. Images are never loaded: a model-written image URL is a classic way to
// leak a conversation to a third party, so they render as plain links instead.
//
// Math ($...$, \(...\), $$...$$, \[...\]) is taken out before markdown can read it (so "\," or "a_1 b_2"
// reach TeX intact) and left as a placeholder holding the TeX as text; typesetMath() then has KaTeX build
// it as DOM. KaTeX sets its layout through element.style, which the page's CSP allows (an HTML string's
// style attributes it would not), and it is loaded only when an answer first has math.
/* global gettext, interpolate */
import { Marked } from "marked";
import DOMPurify from "dompurify";
import hljs from "highlight.js";

const SAFE_URL = /^(https?:|mailto:|#|\/(?!\/))/i;
const LANG = /^[\w+#.-]{1,32}$/;

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

// Inline: $...$ as pandoc reads it (no space inside either dollar, no digit after the closing one, so
// "$5 and $10" stays text; nor a backtick, so "$10 ... `$x$`" leaves the code alone), \(...\), and
// $$...$$ or \[...\] within a paragraph (shown as display math).
const INLINE_MATH = [
  [/^\$\$(?!\$)([\s\S]+?)\$\$/, true],
  [/^\\\[([\s\S]+?)\\\]/, true],
  [/^\\\(([\s\S]+?)\\\)/, false],
  [/^\$(?![\s$])((?:\\[\s\S]|[^\\$`])+?)(?<!\s)\$(?!\d)/, false],
];
// A block: $$...$$ or \[...\] starting a line, alone up to the end of its closing line.
const BLOCK_MATH = /^ {0,3}(?:\$\$([\s\S]+?)\$\$|\\\[([\s\S]+?)\\\]) *(?:\n+|$)/;

function mathPlaceholder(tex, display) {
  const cls = display ? "math math-display" : "math";
  return `<span class="${cls}" data-tex="${escapeHtml(tex)}">${escapeHtml(tex)}</span>`;
}

const mathExtensions = [
  {
    name: "mathBlock",
    level: "block",
    start: (src) => src.match(/^ {0,3}(\$\$|\\\[)/m)?.index,
    tokenizer(src) {
      const match = BLOCK_MATH.exec(src);
      if (match) return { type: "mathBlock", raw: match[0], tex: (match[1] ?? match[2]).trim() };
      return undefined;
    },
    renderer: (token) => `<p class="math-block">${mathPlaceholder(token.tex, true)}</p>\n`,
  },
  {
    name: "mathInline",
    level: "inline",
    start: (src) => src.match(/\$|\\[([]/)?.index,
    tokenizer(src) {
      for (const [pattern, display] of INLINE_MATH) {
        const match = pattern.exec(src);
        if (match && match[1].trim()) return { type: "mathInline", raw: match[0], tex: match[1].trim(), display };
      }
      return undefined;
    },
    renderer: (token) => mathPlaceholder(token.tex, token.display),
  },
];

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
      return `<a href="${escapeHtml(href || "")}">${escapeHtml(text || gettext("image"))}</a>`;
    },
    checkbox({ checked }) {
      return checked ? "☑ " : "☐ ";
    },
  },
  extensions: mathExtensions,
});

const ALLOWED_TAGS = [
  "a", "b", "blockquote", "br", "code", "del", "details", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
  "i", "kbd", "li", "mark", "ol", "p", "pre", "s", "span", "strong", "sub", "summary", "sup", "table",
  "tbody", "td", "th", "thead", "tr", "u", "ul",
];
const ALLOWED_ATTR = ["href", "title", "class", "align", "start", "colspan", "rowspan", "data-tex"];
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

/**
 * Sanitized HTML for `text`, as a DocumentFragment ready to insert. Each top-level block (a paragraph, a
 * heading, a whole list, a table, a quote) takes its direction from its own first letter, so an answer
 * mixing Arabic and English reads right in both; a list's or table's items follow it (their markers and
 * columns with them). Not the items themselves: a block with dir="auto" skips children that have their
 * own when it looks for its first letter. Code and math stay left to right (chat.css).
 */
export function renderMarkdown(text) {
  const html = marked.parse(text || "");
  const fragment = DOMPurify.sanitize(html, {
    ALLOWED_TAGS, ALLOWED_ATTR, ADD_ATTR: ["target"], ALLOW_DATA_ATTR: false, RETURN_DOM_FRAGMENT: true,
  });
  for (const block of fragment.children) {
    if (block.tagName !== "PRE" && block.tagName !== "HR") block.setAttribute("dir", "auto");
  }
  return fragment;
}

let katex = null;
let katexLoading = null;

const TRAILING_PUNCTUATION = /^[.,;:!?)\]]+/;

/** A formula ending a sentence keeps its full stop (or comma...) on its line: the browser may break
 *  between a formula and the text after it, which leaves a lone "." on the next line. */
function keepPunctuationWith(formula) {
  const next = formula.nextSibling;
  const match = next && next.nodeType === Node.TEXT_NODE && TRAILING_PUNCTUATION.exec(next.data);
  if (!match) return;
  next.data = next.data.slice(match[0].length);
  const together = document.createElement("span");
  together.className = "math-with-punctuation";
  formula.replaceWith(together);
  together.append(formula, match[0]);
}

/**
 * Typeset the math placeholders under `root`. `previous` maps "display|tex" to the formulas an earlier
 * paint of the same answer built: they are moved into place rather than built again, so a streaming
 * answer does not rebuild (or flash) every formula once a frame. Returns the map for the next paint.
 * Until KaTeX has loaded, the TeX shows as text and `onLoaded` is called once it has.
 */
export function typesetMath(root, previous = new Map(), onLoaded = null) {
  const built = new Map();
  const placeholders = root.querySelectorAll(".math[data-tex]");
  if (!placeholders.length) return built;
  if (!katex) {
    katexLoading ??= import("katex").then((module) => { katex = module.default; });
    if (onLoaded) katexLoading.then(onLoaded, () => {}); // offline: the TeX stays readable as text
    return built;
  }
  for (const holder of placeholders) {
    const display = holder.classList.contains("math-display");
    const key = `${display ? "d" : "i"}|${holder.dataset.tex}`;
    let formula = previous.get(key)?.pop();
    if (!formula) {
      formula = document.createElement("span");
      formula.className = holder.className;
      formula.dataset.tex = holder.dataset.tex;
      katex.render(holder.dataset.tex, formula, {
        displayMode: display, throwOnError: false, trust: false, strict: "ignore", maxSize: 50, maxExpand: 500,
        output: "htmlAndMathml",
      });
    }
    holder.replaceWith(formula);
    if (!display) keepPunctuationWith(formula);
    if (!built.has(key)) built.set(key, []);
    built.get(key).push(formula);
  }
  return built;
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
    // Translators: the label over a code block whose language is not known.
    label.textContent = match ? match[1] : gettext("code");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "code-copy";
    button.textContent = gettext("Copy");
    // Translators: %(language)s is the code's language as the answer names it ("python"), or the label above.
    button.setAttribute("aria-label", interpolate(gettext("Copy %(language)s code"), { language: label.textContent }, true));
    button.addEventListener("click", () => copy((code || pre).textContent, button));
    head.append(label, button);
    pre.replaceWith(wrap);
    wrap.append(head, pre);
  }
}

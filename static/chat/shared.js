// The public page of a shared link: each answer's text (server-rendered as plain text) becomes
// markdown through the chat page's own renderer, so it is sanitized exactly as it is there.
import { renderMarkdown, decorateCodeBlocks, typesetMath } from "./markdown.js";
import { copyText } from "./dom.js";

for (const md of document.querySelectorAll(".md[data-markdown]")) {
  const holder = document.createElement("div");
  holder.append(renderMarkdown(md.textContent));
  decorateCodeBlocks(holder, copyText);
  md.replaceChildren(...holder.childNodes);
  md.removeAttribute("data-markdown");
}
// Math waits for KaTeX, which is loaded only when a page has some.
const typeset = () => typesetMath(document.getElementById("main"), new Map(), typeset);
typeset();
document.getElementById("main").dataset.ready = "true";

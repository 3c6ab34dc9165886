// Small DOM helpers. Text always goes in through textContent/append, never as HTML.
// Words on screen come from Django's JavaScript catalog (the globals gettext, ngettext, interpolate and
// pgettext, loaded by base.html before the modules), in the page's language.
/* global gettext */

/** The page's language (<html lang>), for Intl's dates and numbers. */
export const pageLanguage = () => document.documentElement.lang || undefined;

/** A number written as the page's language writes it ("1,234" in English). */
export function formatNumber(n) {
  return Number(n).toLocaleString(pageLanguage());
}

/**
 * A translated sentence with nodes in it: `parts(gettext("Share “%(title)s”"), { title: node })` gives
 * ["Share “", node, "”"], to append. The sentence stays one msgid, so translators can move the node.
 */
export function parts(sentence, nodes) {
  return sentence.split(/(%\(\w+\)s)/).filter(Boolean).map((piece) => {
    const match = /^%\((\w+)\)s$/.exec(piece);
    return match && match[1] in nodes ? nodes[match[1]] : piece;
  });
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

const SVG = "http://www.w3.org/2000/svg";

/** An icon from the sprite in chat.html; decorative (the button around it carries the label). */
export function icon(name) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "icon");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  const use = document.createElementNS(SVG, "use");
  use.setAttribute("href", `#i-${name}`);
  svg.append(use);
  return svg;
}

/** A button with an icon and an accessible name (visible text optional). */
export function iconButton(name, label, { text = null, cls = "icon-btn", ...attrs } = {}) {
  const button = el("button", { type: "button", class: cls, "aria-label": text ? null : label, title: label, ...attrs }, icon(name));
  if (text) button.append(el("span", { text }));
  return button;
}

export async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // Plain-http deployments have no async clipboard; fall back to a hidden textarea.
    const area = el("textarea", { class: "visually-hidden", "aria-hidden": "true" });
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  if (button) {
    const label = button.querySelector("span") || button;
    const before = label.textContent;
    const labelBefore = button.getAttribute("aria-label");
    if (label !== button || !button.querySelector("svg")) label.textContent = gettext("Copied");
    if (labelBefore) button.setAttribute("aria-label", gettext("Copied"));
    button.classList.add("copied");
    setTimeout(() => {
      if (label !== button || !button.querySelector("svg")) label.textContent = before;
      if (labelBefore) button.setAttribute("aria-label", labelBefore);
      button.classList.remove("copied");
    }, 1500);
  }
}

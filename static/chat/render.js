// One message on screen. User text is shown as typed (textContent); answers are markdown through
// markdown.js (sanitized). While an answer streams, repaints are batched to one per frame.
/* global gettext, ngettext, interpolate */
import { el, icon, iconButton, copyText, formatNumber } from "./dom.js";
import { renderMarkdown, decorateCodeBlocks, typesetMath } from "./markdown.js";

export const ACTIVE = new Set(["pending", "streaming"]);

const NOTICES = {
  stopped: { cls: "muted", text: gettext("Stopped") },
  failed: { cls: "danger", text: gettext("This answer failed.") },
  interrupted: { cls: "warn", text: gettext("This answer was interrupted.") },
  blocked: { cls: "warn", text: gettext("This answer was blocked.") },
};

function branchSwitcher(message, onSwitch) {
  const siblings = message.siblings || [];
  if (siblings.length < 2) return null;
  const at = siblings.indexOf(message.id);
  const prev = iconButton("chevron-left", gettext("Previous version"), { disabled: at <= 0 ? true : null });
  const next = iconButton("chevron-right", gettext("Next version"), { disabled: at >= siblings.length - 1 ? true : null });
  prev.addEventListener("click", () => onSwitch(siblings[at - 1]));
  next.addEventListener("click", () => onSwitch(siblings[at + 1]));
  return el("div", { class: "branch", role: "group", "aria-label": interpolate(gettext("Version %(at)s of %(count)s"), { at: at + 1, count: siblings.length }, true) },
    prev, el("span", { class: "branch-count", "aria-hidden": "true", text: `${at + 1}/${siblings.length}` }), next);
}

/** The pictures a message carried, each opening at full size; one that cannot be shown (deleted) says so. */
function pictures(images) {
  if (!images || !images.length) return null;
  return el("div", { class: "msg-pictures" }, ...images.map((image) => {
    const img = el("img", { src: image.url, alt: gettext("A picture you sent"), loading: "lazy", decoding: "async" });
    const link = el("a", { href: image.url, target: "_blank", rel: "noopener", class: "msg-picture" }, img);
    img.addEventListener("error", () => link.replaceWith(el("span", { class: "msg-picture-gone", text: gettext("Picture unavailable") })));
    return link;
  }));
}

/** A user message: the text as typed, its pictures, edit-and-resend, and branch switching. */
function userView(message, ctx) {
  const bubble = el("div", { class: "bubble", dir: "auto" });
  // A message moderators hid has no text left for anyone but staff: say so in its place.
  const show = (m) => {
    const removed = m.status === "blocked";
    bubble.textContent = removed ? (m.error || gettext("This message was removed.")) : m.content;
    bubble.classList.toggle("bubble-removed", removed);
  };
  show(message);
  const actions = el("div", { class: "msg-actions" });
  const body = el("div", { class: "msg-body" }, pictures(message.images), bubble);
  const root = el("article", { class: "msg msg-user", dataset: { id: String(message.id), role: "user" } },
    el("h2", { class: "visually-hidden", text: gettext("You said:") }), body, actions);

  function fill(current) {
    actions.replaceChildren(...[
      branchSwitcher(current, ctx.onSwitch),
      iconButton("copy", gettext("Copy message"), { onclick: (e) => copyText(current.content, e.currentTarget) }),
      ctx.editable(current) && current.status !== "blocked"
        ? iconButton("edit", gettext("Edit message"), { cls: "icon-btn edit-message", onclick: () => startEdit(current) }) : null,
    ].filter(Boolean));
  }

  function startEdit(current) {
    const area = el("textarea", { class: "edit-area", "aria-label": gettext("Edit your message"), rows: "3", dir: "auto" });
    area.value = current.content;
    const cancel = el("button", { type: "button", class: "secondary", text: gettext("Cancel") });
    const save = el("button", { type: "submit", text: gettext("Send") });
    const form = el("form", { class: "edit-form" }, area, el("div", { class: "edit-buttons" }, cancel, save));
    const close = () => { form.replaceWith(bubble); actions.hidden = false; root.querySelector(".edit-message")?.focus(); };
    cancel.addEventListener("click", close);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const text = area.value.trim();
      if (!text || text === current.content.trim()) { close(); return; }
      save.disabled = true;
      const ok = await ctx.onEdit(current, text);
      if (!ok) save.disabled = false; // refused: the edited text stays in the box
    });
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
      if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); close(); }
    });
    bubble.replaceWith(form);
    actions.hidden = true;
    area.focus();
    area.setSelectionRange(area.value.length, area.value.length);
  }

  fill(message);
  return { root, update(current) { show(current); fill(current); }, setText() {} };
}

/**
 * Citations: each "[n]" that names one of the answer's sources becomes a button opening the passage
 * (text in code is left alone); the sources are listed under the answer.
 */
function linkCitations(holder, sources, onCite) {
  const byN = new Map(sources.map((s) => [String(s.n), s]));
  const walker = document.createTreeWalker(holder, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => (node.parentElement.closest("pre, code, .math") || !/\[\d+\]/.test(node.data)
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
  });
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  for (const node of nodes) {
    const parts = node.data.split(/(\[\d+\])/);
    node.replaceWith(...parts.map((part) => {
      const source = byN.get(part.slice(1, -1));
      if (!/^\[\d+\]$/.test(part) || !source) return part;
      return el("button", { type: "button", class: "cite", text: source.n, title: citeLabel(source),
        "aria-label": interpolate(gettext("Source %(n)s: %(source)s"), { n: source.n, source: citeLabel(source) }, true), onclick: (e) => onCite(source, e.currentTarget) });
    }));
  }
}

function citeLabel(source) {
  return source.page
    ? interpolate(gettext("%(name)s, page %(page)s"), { name: source.name, page: source.page }, true)
    : source.name;
}

function sourcesList(sources, onCite) {
  return el("div", { class: "msg-sources" },
    el("h3", { class: "sources-title", text: gettext("Sources") }),
    el("ol", {}, ...sources.map((source) => el("li", {},
      el("button", { type: "button", class: "source", onclick: (e) => onCite(source, e.currentTarget) },
        el("span", { class: "source-n", text: source.n }),
        el("span", { class: "source-name", text: source.name, dir: "auto" }),
        source.page ? el("span", { class: "source-page", text: interpolate(gettext("p. %(page)s"), { page: source.page }, true) }) : null)))));
}

/** An answer: streamed markdown, its final status, copy, regenerate and branch switching. */
function assistantView(message, ctx) {
  const md = el("div", { class: "md" }); // its blocks have their own direction (markdown.js)
  const notice = el("p", { class: "msg-notice", hidden: true });
  const cacheNote = el("p", { class: "cache-note", hidden: true }); // the answer to a similar earlier question
  const cutNote = el("p", { class: "cut-note", hidden: true }); // cut at its length limit: Continue
  const actions = el("div", { class: "msg-actions" });
  const feedbackSlot = el("div", { class: "feedback-slot", hidden: true }); // the comment box (feedback.js)
  const reportSlot = el("div", { class: "report-slot", hidden: true }); // the report form (report.js)
  const sources = message.sources && message.sources.length && ctx.onCite ? sourcesList(message.sources, ctx.onCite) : null;
  const root = el("article", { class: "msg msg-assistant", dataset: { id: String(message.id), role: "assistant" } },
    el("div", { class: "avatar", "aria-hidden": "true" }, icon("spark")),
    el("div", { class: "msg-main" },
      el("h2", { class: "visually-hidden", text: interpolate(gettext("%(name)s said:"), { name: ctx.siteName }, true) }), md, sources, notice, cacheNote, cutNote, actions, feedbackSlot,
      reportSlot));

  let text = message.content || "";
  let current = message;
  let painted = null;
  let frame = 0;
  let formulas = new Map(); // the last paint's typeset math, reused by the next (markdown.js)

  function paint() {
    frame = 0;
    if (painted === text) return;
    painted = text;
    if (!text && ACTIVE.has(current.status)) {
      md.replaceChildren(el("span", { class: "thinking", "aria-label": gettext("Thinking") }, el("i"), el("i"), el("i")));
    } else {
      const fragment = renderMarkdown(text);
      const holder = el("div");
      holder.append(fragment);
      decorateCodeBlocks(holder, copyText);
      formulas = typesetMath(holder, formulas, () => { painted = null; paint(); });
      if (current.sources && current.sources.length && ctx.onCite) linkCitations(holder, current.sources, ctx.onCite);
      md.replaceChildren(...holder.childNodes);
    }
    ctx.onPainted();
  }

  function fill() {
    const active = ACTIVE.has(current.status);
    root.dataset.status = current.status;
    root.setAttribute("aria-busy", String(active));
    const n = NOTICES[current.status];
    notice.hidden = !n;
    if (n) {
      notice.className = `msg-notice ${n.cls}`;
      notice.replaceChildren(icon(current.status === "stopped" ? "stop" : "alert"),
        el("span", { text: current.error || n.text })); // a stop's own reason too (a suspension)
    }
    // Served from the semantic cache: said so, with one click to have the model answer this question itself.
    const similar = current.cache_hit === "similar" && (current.status === "completed" || current.status === "stopped");
    cacheNote.hidden = !similar;
    if (similar) {
      cacheNote.replaceChildren(icon("refresh"),
        el("span", {}, `${gettext("This is the answer to a very similar earlier question.")} `,
          ctx.regenerable(current)
            ? el("button", { type: "button", class: "answer-afresh", text: gettext("Answer afresh"),
              onclick: () => ctx.onRegenerate(current) })
            : null));
    }
    // Cut at its length limit: said so, and (on the last answer) one click writes on from where it stopped.
    cutNote.hidden = !current.can_continue;
    if (current.can_continue) {
      cutNote.replaceChildren(icon("info"),
        el("span", {}, `${gettext("This answer reached its length limit.")} `,
          ctx.regenerable(current)
            ? el("button", { type: "button", class: "continue-answer", text: gettext("Continue"),
              title: gettext("Write on from where the answer stopped"), onclick: () => ctx.onContinue(current) })
            : null));
    }
    const tokens = current.completion_tokens
      ? interpolate(ngettext("%(count)s token", "%(count)s tokens", current.completion_tokens),
        { count: formatNumber(current.completion_tokens) }, true)
      : null;
    // Auto chose the model: say so, and under the small model's answer offer the larger one.
    const auto = current.auto_route && current.auto_route !== "escalated";
    const larger = ctx.larger;
    const retry = auto && larger && larger.allowed && current.model !== larger.id && ctx.regenerable(current)
      ? el("button", { type: "button", class: "retry-larger", text: interpolate(gettext("Retry with %(model)s"), { model: larger.name }, true),
        title: gettext("Ask the larger model for a new answer"), onclick: () => ctx.onRetryLarger(current, larger.id) })
      : null;
    actions.hidden = active;
    actions.replaceChildren(...[
      branchSwitcher(current, ctx.onSwitch),
      iconButton("copy", gettext("Copy answer"), { cls: "icon-btn copy-answer", onclick: (e) => copyText(text, e.currentTarget) }),
      ctx.regenerable(current) ? iconButton("refresh", gettext("Regenerate answer"), { onclick: () => ctx.onRegenerate(current) }) : null,
      ctx.feedback ? ctx.feedback.controls(current, feedbackSlot) : null,
      ctx.report ? ctx.report.control(current, reportSlot) : null,
      retry,
      el("span", { class: "msg-meta", text: [auto ? interpolate(gettext("Auto: %(model)s"), { model: current.model }, true) : current.model, tokens].filter(Boolean).join(" · ") }),
    ].filter(Boolean));
  }

  fill();
  paint();
  return {
    root,
    get text() { return text; },
    setText(next) {
      text = next;
      if (!frame) frame = requestAnimationFrame(paint);
    },
    update(next) {
      current = next;
      if (!ACTIVE.has(next.status)) { text = next.content || ""; painted = null; }
      fill();
      if (frame) cancelAnimationFrame(frame);
      paint();
    },
  };
}

export function messageView(message, ctx) {
  return message.role === "user" ? userView(message, ctx) : assistantView(message, ctx);
}

/** The welcome screen of a new chat, with a few prompts to start from. */
export function emptyState(name, onPick) {
  const ideas = [
    [gettext("Explain a concept"), gettext("Explain how prefix caching speeds up LLM inference, with an analogy.")],
    [gettext("Write some code"), gettext("Write a Python function that merges overlapping intervals, with tests.")],
    [gettext("Plan something"), gettext("Plan a three-day trip to Lisbon for someone who loves food and walking.")],
    [gettext("Improve writing"),
      gettext("Make this sentence clearer: 'The meeting that was planned got moved to later.'")],
  ];
  return el("div", { class: "empty" },
    el("div", { class: "empty-mark", "aria-hidden": "true" }, icon("spark")),
    el("h2", { class: "empty-title", text: name ? interpolate(gettext("How can I help, %(name)s?"), { name }, true) : gettext("How can I help?") }),
    el("ul", { class: "ideas", "aria-label": gettext("Suggestions") }, ...ideas.map(([title, prompt]) =>
      el("li", {}, el("button", { type: "button", class: "idea", onclick: () => onPick(prompt) },
        el("strong", { text: title }), el("span", { text: prompt }))))));
}

// The message box: Enter sends, Shift+Enter adds a line, a draft per conversation kept in
// localStorage, the send/stop button, and a notice area for refusals and the busy countdown.
import { el } from "./dom.js";

const DRAFT = "sglchat:draft:";

export function createComposer({ onSubmit, onStop }) {
  const form = document.getElementById("composer");
  const box = document.getElementById("prompt");
  const send = document.getElementById("send");
  const stop = document.getElementById("stop");
  const notice = document.getElementById("composer-notice");
  let draftKey = DRAFT + "new";
  let mode = "idle"; // idle | sending | waiting (busy countdown) | streaming | stopping

  function store(key, value) {
    try { value ? localStorage.setItem(key, value) : localStorage.removeItem(key); } catch { /* private mode */ }
  }

  function autosize() {
    box.style.height = "auto";
    box.style.height = `${Math.min(box.scrollHeight, 240)}px`;
  }

  function sync() {
    const streaming = mode === "streaming" || mode === "stopping";
    send.hidden = streaming;
    stop.hidden = !streaming;
    stop.disabled = mode === "stopping";
    stop.setAttribute("aria-label", mode === "stopping" ? "Stopping…" : "Stop generating");
    send.disabled = mode === "sending" || mode === "waiting" || !box.value.trim();
    form.dataset.mode = mode;
  }

  box.addEventListener("input", () => { store(draftKey, box.value); autosize(); sync(); });
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = box.value.trim();
    if (!text || mode !== "idle") return; // while an answer streams, Enter does not queue another
    onSubmit(text);
  });
  stop.addEventListener("click", () => onStop());

  let countdown = null;

  const api = {
    get value() { return box.value; },
    set value(text) { box.value = text; store(draftKey, text); autosize(); sync(); },
    focus() { box.focus(); },
    /** Switch to another conversation's draft ("new" for a chat not created yet). */
    useDraft(id) {
      draftKey = DRAFT + (id ?? "new");
      let saved = "";
      try { saved = localStorage.getItem(draftKey) || ""; } catch { /* ignore */ }
      box.value = saved;
      autosize();
      sync();
    },
    /** The draft of a new chat becomes the draft of the conversation it created. */
    moveDraft(id) {
      const next = DRAFT + id;
      if (draftKey !== next) { store(draftKey, ""); draftKey = next; store(draftKey, box.value); }
    },
    clearDraftOf(id) { store(DRAFT + id, ""); },
    setMode(next) { mode = next; sync(); },
    get mode() { return mode; },

    clearNotice() {
      if (countdown) { countdown.cancel(); countdown = null; }
      notice.replaceChildren();
      notice.hidden = true;
    },
    /** A refusal or problem, in words, with an optional link (e.g. to the plans page). */
    showNotice({ kind = "error", text, link = null, actions = [] }) {
      api.clearNotice();
      notice.className = `composer-notice ${kind}`;
      notice.append(el("span", { class: "notice-text", text }));
      if (link) notice.append(" ", el("a", { href: link.href, text: link.text }));
      for (const [label, handler] of actions) {
        notice.append(el("button", { type: "button", class: "link-btn", text: label, onclick: handler }));
      }
      notice.hidden = false;
    },
    /**
     * "Busy, retrying in N s": resolves true when the time is up (or on "Retry now"), false when
     * cancelled (by the button, or by clearNotice when something else happens).
     */
    busyCountdown(seconds) {
      api.clearNotice();
      return new Promise((resolve) => {
        let left = Math.max(1, Math.round(seconds));
        const count = el("span", { class: "notice-text", "aria-hidden": "true" });
        // Screen readers hear one sentence, not a number every second.
        const spoken = el("span", { class: "visually-hidden", text: `The engine is busy. Retrying automatically in ${left} seconds.` });
        const render = () => { count.textContent = `Busy, retrying in ${left} s`; };
        let timer = null;
        const finish = (value) => {
          clearInterval(timer);
          countdown = null;
          notice.replaceChildren();
          notice.hidden = true;
          resolve(value);
        };
        notice.className = "composer-notice busy";
        notice.append(el("span", { class: "spinner", "aria-hidden": "true" }), count, spoken,
          el("button", { type: "button", class: "link-btn", text: "Retry now", onclick: () => finish(true) }),
          el("button", { type: "button", class: "link-btn", text: "Cancel", onclick: () => finish(false) }));
        notice.hidden = false;
        render();
        timer = setInterval(() => { left -= 1; if (left <= 0) finish(true); else render(); }, 1000);
        countdown = { cancel: () => finish(false) };
      });
    },
  };
  sync();
  return api;
}

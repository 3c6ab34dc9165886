// The message box: Enter sends, Shift+Enter adds a line, a draft per conversation kept in
// localStorage, the send/stop button, and a notice area for refusals, the busy countdown, the
// rate-limit wait and a refusal nothing on the page can lift (a suspended account).
/* global gettext, ngettext, interpolate */
import { el, formatNumber } from "./dom.js";

const DRAFT = "sglchat:draft:";

export function createComposer({ onSubmit, onStop }) {
  const form = document.getElementById("composer");
  const box = document.getElementById("prompt");
  const send = document.getElementById("send");
  const stop = document.getElementById("stop");
  const notice = document.getElementById("composer-notice");
  let draftKey = DRAFT + "new";
  let mode = "idle"; // idle | sending | waiting (busy countdown) | streaming | stopping
  let held = false; // a rate limit: nothing can be sent until its countdown ends (whatever the mode)
  let blocked = false; // the account may not send at all (suspended): for good, on this page
  let waitingFor = null; // the name of a file still being uploaded or read: Send waits for it

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
    stop.setAttribute("aria-label", mode === "stopping" ? gettext("Stopping…") : gettext("Stop generating"));
    send.disabled = mode === "sending" || mode === "waiting" || held || blocked || Boolean(waitingFor) || !box.value.trim();
    send.title = waitingFor ? interpolate(gettext("Waiting for %(name)s to be read"), { name: waitingFor }, true)
      : gettext("Send (Enter)");
    form.dataset.mode = mode;
    form.dataset.held = held;
    form.dataset.blocked = blocked;
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
    // While an answer streams, Enter does not queue another; a file still being read is waited for.
    if (!text || mode !== "idle" || held || blocked || waitingFor) return;
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
    /** A file of the next message is still being uploaded or read (its name), or null. */
    setWaitingFor(name) { waitingFor = name; sync(); },
    get mode() { return mode; },

    clearNotice() {
      if (blocked) return; // nothing replaces the reason the account cannot send
      if (countdown) { countdown.cancel(); countdown = null; }
      delete notice.dataset.waiting;
      notice.replaceChildren();
      notice.hidden = true;
    },
    /** A refusal or problem, in words, with an optional link (e.g. to the plans page). */
    showNotice({ kind = "error", text, link = null, actions = [] }) {
      if (blocked) return;
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
      if (blocked) return Promise.resolve(false);
      api.clearNotice();
      return new Promise((resolve) => {
        let left = Math.max(1, Math.round(seconds));
        const count = el("span", { class: "notice-text", "aria-hidden": "true" });
        // Screen readers hear one sentence, not a number every second.
        const spoken = el("span", { class: "visually-hidden", text: interpolate(ngettext(
          "The engine is busy. Retrying automatically in %(count)s second.",
          "The engine is busy. Retrying automatically in %(count)s seconds.", left), { count: formatNumber(left) }, true) });
        const render = () => {
          count.textContent = interpolate(gettext("Busy, retrying in %(count)s s"), { count: formatNumber(left) }, true);
        };
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
          el("button", { type: "button", class: "link-btn", text: gettext("Retry now"), onclick: () => finish(true) }),
          el("button", { type: "button", class: "link-btn", text: gettext("Cancel"), onclick: () => finish(false) }));
        notice.hidden = false;
        render();
        timer = setInterval(() => { left -= 1; if (left <= 0) finish(true); else render(); }, 1000);
        countdown = { cancel: () => finish(false) };
      });
    },
    /**
     * Send is waiting for one of the person's other answers to finish: the refusal's sentence, what
     * happens next, a spinner and Cancel. No countdown (nobody knows when an answer ends). Resolves true
     * after `seconds` (time to ask again; the notice stays, unchanged, for the next wait), false on Cancel
     * or when something else clears the notice.
     */
    waitForTurn({ text, then, seconds, link = null }) {
      if (blocked) return Promise.resolve(false);
      if (notice.dataset.waiting !== text) {
        api.clearNotice();
        notice.className = "composer-notice warn waiting";
        notice.dataset.waiting = text;
        notice.append(el("span", { class: "spinner", "aria-hidden": "true" }),
          el("span", { class: "notice-text", text: `${text} ${then}` }));
        if (link) notice.append(" ", el("a", { href: link.href, text: link.text }));
        notice.append(el("button", { type: "button", class: "link-btn notice-cancel", text: gettext("Cancel"),
          onclick: () => countdown?.cancel() }));
        notice.hidden = false;
      }
      return new Promise((resolve) => {
        const timer = setTimeout(() => { countdown = null; resolve(true); }, seconds * 1000);
        countdown = { cancel: () => {
          clearTimeout(timer);
          countdown = null;
          delete notice.dataset.waiting;
          notice.replaceChildren();
          notice.hidden = true;
          resolve(false);
        } };
      });
    },
    /**
     * A refusal that lifts by itself after `seconds` (a rate limit). The notice shows `render(left)`
     * for the whole seconds left, counted down in place; Send and Enter wait until the time is up,
     * then the notice clears itself. What was typed stays in the box. `spoken` is what a screen
     * reader hears, once (not a number every second).
     */
    holdSending({ seconds, render, spoken, kind = "warn", link = null }) {
      if (blocked) return;
      api.clearNotice();
      // Counted from a deadline, not by ticks, so a throttled background tab still shows the truth.
      const deadline = Date.now() + Math.max(1, Math.ceil(seconds)) * 1000;
      const count = el("span", { class: "notice-text", "aria-hidden": "true" });
      notice.className = `composer-notice ${kind}`;
      notice.append(count, el("span", { class: "visually-hidden", text: spoken }));
      if (link) notice.append(" ", el("a", { href: link.href, text: link.text }));
      notice.hidden = false;
      let timer = null;
      const finish = () => {
        clearTimeout(timer);
        countdown = null;
        held = false;
        notice.replaceChildren();
        notice.hidden = true;
        sync();
      };
      const tick = () => {
        const left = deadline - Date.now();
        if (left <= 0) { finish(); return; }
        count.textContent = render(Math.ceil(left / 1000));
        timer = setTimeout(tick, left % 1000 || 1000); // wake when the shown number changes
      };
      held = true;
      countdown = { cancel: finish };
      sync();
      tick();
    },
    /**
     * The account may not send at all, and nothing on this page can change that (staff suspended
     * it): the notice says so with the server's sentence, stays, and Send stays disabled. No link
     * to the plans and no "try again": neither would help. What was typed stays in the box.
     */
    block({ title, text }) {
      // Every channel that hears the refusal (the stream, the WebSocket, the next request) brings it here:
      // said once.
      if (blocked) return;
      api.clearNotice();
      blocked = true;
      notice.className = "composer-notice error blocked";
      notice.setAttribute("role", "alert");
      notice.append(el("strong", { class: "notice-title", text: title }), el("span", { class: "notice-text", text }));
      notice.hidden = false;
      sync();
    },
    get blocked() { return blocked; },
  };
  sync();
  return api;
}

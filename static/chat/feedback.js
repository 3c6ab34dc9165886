// Thumbs up/down on a finished answer, with an optional comment (docs/chat-protocol.md, "Answer
// feedback"). The buttons sit in the answer's action row; the comment box opens under it after a
// thumbs-down, or from the comment button. The saved rating is kept on the message object
// (`message.feedback`), so re-drawing the action row shows it as it is.
/* global gettext */
import { el, iconButton } from "./dom.js";

const RATABLE = new Set(["completed", "stopped"]);
const COMMENT_MAX = 2000;

export function createFeedback({ api, onError, announce }) {
  /** The rating buttons for `message`, or null when it cannot be rated; `slot` receives the comment box. */
  function controls(message, slot) {
    if (message.role !== "assistant" || !RATABLE.has(message.status)) return null;
    const current = message.feedback || null;
    const rated = (rating) => current && current.rating === rating;
    const up = iconButton("thumb-up", rated("up") ? gettext("Remove your thumbs up") : gettext("Good answer"),
      { cls: "icon-btn rate-btn", "aria-pressed": String(!!rated("up")), dataset: { rating: "up" } });
    const down = iconButton("thumb-down", rated("down") ? gettext("Remove your thumbs down") : gettext("Bad answer"),
      { cls: "icon-btn rate-btn", "aria-pressed": String(!!rated("down")), dataset: { rating: "down" } });
    const group = el("div", { class: "rate", role: "group", "aria-label": gettext("Rate this answer") }, up, down);
    if (current) {
      group.append(iconButton("comment", current.comment ? gettext("Edit your comment") : gettext("Add a comment"),
        { cls: `icon-btn rate-btn${current.comment ? " has-comment" : ""}`, onclick: () => openComment(message, slot) }));
    }
    up.addEventListener("click", () => choose(message, "up", slot, group));
    down.addEventListener("click", () => choose(message, "down", slot, group));
    return group;
  }

  async function choose(message, rating, slot, group) {
    const withdraw = message.feedback && message.feedback.rating === rating;
    for (const button of group.querySelectorAll("button")) button.disabled = true;
    try {
      if (withdraw) {
        await api.withdrawFeedback(message.id);
        message.feedback = null;
        closeComment(slot);
        announce(gettext("Rating removed."));
      } else {
        const data = await api.rate(message.id, { rating });
        message.feedback = data.feedback;
        announce(rating === "up" ? gettext("Thanks: rated as a good answer.") : gettext("Thanks: rated as a bad answer."));
      }
    } catch (error) {
      for (const button of group.querySelectorAll("button")) button.disabled = false;
      onError(error);
      return;
    }
    redraw(message, slot, group, rating);
    if (!withdraw && rating === "down" && !message.feedback.comment) openComment(message, slot);
  }

  /** Re-draw the buttons as saved, keeping the focus on the thumb the user pressed. */
  function redraw(message, slot, group, focusRating = message.feedback?.rating || "up") {
    const next = controls(message, slot);
    if (next) group.replaceWith(next);
    (next || group).querySelector(`[data-rating="${focusRating}"]`)?.focus();
  }

  function closeComment(slot) {
    slot.replaceChildren();
    slot.hidden = true;
  }

  function openComment(message, slot) {
    const area = el("textarea", { class: "feedback-text", dir: "auto", rows: "2", maxlength: String(COMMENT_MAX),
      "aria-label": gettext("Comment on this answer"), placeholder: message.feedback?.rating === "down"
        ? gettext("What was wrong with this answer? (optional)") : gettext("What was good about this answer? (optional)") });
    area.value = message.feedback?.comment || "";
    const cancel = el("button", { type: "button", class: "secondary", text: message.feedback?.comment ? gettext("Cancel") : gettext("Skip") });
    const save = el("button", { type: "submit", text: gettext("Send feedback") });
    const error = el("p", { class: "feedback-error", role: "alert", hidden: true });
    const form = el("form", { class: "feedback-form", "aria-label": gettext("Feedback on this answer") },
      area, error, el("div", { class: "edit-buttons" }, cancel, save));
    const row = () => slot.closest(".msg-main")?.querySelector(".rate");
    cancel.addEventListener("click", () => { closeComment(slot); row()?.querySelector("button")?.focus(); });
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      if (!message.feedback) { closeComment(slot); return; }
      save.disabled = true;
      error.hidden = true;
      try {
        const data = await api.rate(message.id, { rating: message.feedback.rating, comment: area.value });
        message.feedback = data.feedback;
      } catch (failure) {
        save.disabled = false;
        error.textContent = failure.message; // what they typed stays in the box
        error.hidden = false;
        return;
      }
      closeComment(slot);
      const group = row();
      if (group) redraw(message, slot, group);
      announce(gettext("Thanks for your feedback."));
    });
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
      if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); cancel.click(); }
    });
    showForm(slot, form, area);
    area.setSelectionRange(area.value.length, area.value.length);
  }

  return { controls };
}

/**
 * Open `form` (the comment box here, the report form in report.js) in `slot` under its answer, its box
 * focused and all of it in sight above the composer. Under the last answer the slot is the thread's very
 * end: the browser's own scroll to a focused box shows the box at best, leaving the buttons under the
 * composer. While the form has the focus, less room (a phone's keyboard, a shorter window, a taller
 * composer) or a taller form (an error) brings it back into sight.
 */
export function showForm(slot, form, area) {
  slot.replaceChildren(form);
  slot.hidden = false;
  area.focus({ preventScroll: true });
  revealForm(form);
  const scroller = form.closest(".messages-scroll");
  if (!scroller) return;
  const watch = new ResizeObserver(() => {
    if (!form.isConnected) watch.disconnect(); // closed
    else if (form.contains(document.activeElement)) revealForm(form);
  });
  watch.observe(scroller);
  watch.observe(form);
}

/** Scroll the thread just enough for `form` to show whole above the composer (its top, if it is taller than the room). */
function revealForm(form) {
  const scroller = form.closest(".messages-scroll");
  if (!scroller) return;
  const view = scroller.getBoundingClientRect();
  const composer = document.getElementById("composer")?.getBoundingClientRect();
  // The thread's scroll-padding-bottom keeps clear of the fade over the composer's top edge.
  const clear = parseFloat(getComputedStyle(scroller).scrollPaddingBottom) || 0;
  const floor = Math.min(view.bottom, composer ? composer.top : view.bottom) - clear;
  const box = form.getBoundingClientRect();
  const hiddenBelow = box.bottom - floor;
  const roomAbove = box.top - view.top;
  if (hiddenBelow > 0) scroller.scrollTop += Math.min(hiddenBelow, roomAbove);
  else if (roomAbove < 0) scroller.scrollTop += roomAbove;
}

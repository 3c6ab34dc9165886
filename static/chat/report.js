// Reporting an answer to staff (docs/moderation.md, "Reports"). A flag button in the answer's action
// row opens a short form under it (the reason is optional); once sent, the button says so. Reporting
// the same answer again changes nothing on the server, so a reload that forgets the state is harmless.
/* global gettext */
import { el, iconButton } from "./dom.js";
import { showForm } from "./feedback.js";

const REPORTABLE = new Set(["completed", "stopped", "failed", "interrupted", "blocked"]);
const REASON_MAX = 1000;

export function createReport({ api, announce }) {
  /** The report button for `message`, or null when it cannot be reported; `slot` receives the form. */
  function control(message, slot) {
    if (message.role !== "assistant" || !REPORTABLE.has(message.status)) return null;
    if (message.reported) {
      return iconButton("flag", gettext("Reported to staff"),
        { cls: "icon-btn report-btn", "aria-pressed": "true", disabled: true });
    }
    const button = iconButton("flag", gettext("Report this answer"), { cls: "icon-btn report-btn", "aria-pressed": "false" });
    button.addEventListener("click", () => (slot.hidden ? open(message, slot, button) : close(slot, button)));
    return button;
  }

  function close(slot, button) {
    slot.replaceChildren();
    slot.hidden = true;
    button?.focus();
  }

  function open(message, slot, button) {
    const area = el("textarea", { class: "feedback-text", dir: "auto", rows: "2", maxlength: String(REASON_MAX),
      "aria-label": gettext("Why are you reporting this answer?"),
      placeholder: gettext("What is wrong with this answer? (optional)") });
    const cancel = el("button", { type: "button", class: "secondary", text: gettext("Cancel") });
    const send = el("button", { type: "submit", text: gettext("Report to staff") });
    const error = el("p", { class: "feedback-error", role: "alert", hidden: true });
    const form = el("form", { class: "feedback-form report-form", "aria-label": gettext("Report this answer") },
      el("p", { class: "report-help", text: gettext("Staff will see this answer and what you write here.") }),
      area, error, el("div", { class: "edit-buttons" }, cancel, send));
    cancel.addEventListener("click", () => close(slot, button));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      send.disabled = true;
      error.hidden = true;
      try {
        await api.report(message.id, area.value);
      } catch (failure) {
        send.disabled = false;
        error.textContent = failure.message; // what they typed stays in the box
        error.hidden = false;
        return;
      }
      message.reported = true;
      slot.replaceChildren();
      slot.hidden = true;
      const done = control(message, slot);
      button.replaceWith(done);
      announce(gettext("Reported. Staff will review this answer."));
    });
    area.addEventListener("keydown", (e) => {
      if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); cancel.click(); }
    });
    showForm(slot, form, area);
  }

  return { control };
}

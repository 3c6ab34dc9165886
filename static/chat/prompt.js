// "System prompt" in a conversation's menu (and the header's sign when the open chat has one): a dialog to
// read and change the conversation's own system prompt (PATCH /chat/api/conversations/<id> {"system_prompt"}).
// The next answer uses it, after the site's prompt and the person's custom instructions; the server decides
// the limits (the longest prompt, CHAT_MAX_SYSTEM_PROMPT_CHARS, from the page's bootstrap
// `limits.system_prompt_chars`, passed in as `maxChars`). Once saved, the dialog says so for a moment, then closes.
/* global gettext */
import { el, parts, formatNumber } from "./dom.js";

const CONFIRMED_FOR_MS = 1500; // long enough to read the confirmation; Esc or Close end it sooner

export function openSystemPromptDialog({ api, conversation, title, maxChars, returnFocus = () => null,
  onSaved = () => {} }) {
  const MAX = maxChars;
  const area = el("textarea", { id: "system-prompt-text", dir: "auto", rows: "7", maxlength: String(MAX),
    placeholder: gettext("For example: You are a patient maths tutor. Ask one question at a time."),
    "aria-describedby": "system-prompt-help" });
  const count = el("span", { class: "prompt-count", "aria-live": "off" });
  const error = el("p", { class: "share-error", role: "alert", hidden: true });
  const status = el("p", { class: "prompt-status", role: "status" }); // in the page from the start, so it is read out
  const cancel = el("button", { type: "button", class: "secondary", text: gettext("Cancel") });
  const save = el("button", { type: "button", text: gettext("Save") });
  const dialog = el("dialog", { class: "confirm prompt-dialog", "aria-labelledby": "system-prompt-title" },
    el("h2", { id: "system-prompt-title" },
      ...parts(gettext("System prompt for “%(title)s”"), { title: el("span", { class: "share-name", text: title }) })),
    el("label", { for: "system-prompt-text", class: "visually-hidden", text: gettext("System prompt") }),
    area,
    el("p", { id: "system-prompt-help", class: "prompt-help" },
      // Translators: %(link)s is a link saying "custom instructions" (to the Settings page).
      ...parts(gettext("Used from the next answer in this chat only, after your %(link)s. Leave it empty for none."),
        { link: el("a", { href: "/settings/", text: gettext("custom instructions") }) }), " ", count),
    error,
    status,
    el("div", { class: "confirm-buttons" }, cancel, save));

  const update = () => {
    count.textContent = `${formatNumber(area.value.length)} / ${formatNumber(MAX)}`;
  };
  area.addEventListener("input", update);

  function finish() { dialog.close(); }
  dialog.addEventListener("close", () => { dialog.remove(); returnFocus()?.focus(); });
  cancel.addEventListener("click", finish);
  let had = false; // the chat had a prompt when the dialog opened
  save.addEventListener("click", async () => {
    save.disabled = true;
    error.hidden = true;
    let updated;
    try {
      updated = await api.updateConversation(conversation.id, { system_prompt: area.value });
    } catch (problem) {
      error.textContent = problem.message || gettext("That did not work. Try again.");
      error.hidden = false;
      save.disabled = false;
      return;
    }
    onSaved(updated);
    confirmSaved(updated.system_prompt);
  });

  /** Say what was saved (the server's text: spaces alone are none), then close. */
  function confirmSaved(saved) {
    status.textContent = saved ? gettext("System prompt saved for this chat.")
      : had ? gettext("System prompt removed.") : gettext("This chat has no system prompt.");
    area.disabled = true;
    cancel.textContent = gettext("Close");
    cancel.focus(); // Save stays disabled: the focus must not be left on it
    setTimeout(finish, CONFIRMED_FOR_MS);
  }

  document.body.append(dialog);
  area.disabled = true;
  save.disabled = true; // until the prompt is here: saving the empty box would remove it
  dialog.showModal();
  api.conversation(conversation.id, null, null, { limit: 1 }).then((data) => {
    area.value = data.conversation.system_prompt || "";
    had = Boolean(area.value);
    area.disabled = false;
    save.disabled = false;
    update();
    area.focus();
  }, (problem) => {
    error.textContent = problem.message || gettext("The system prompt could not be loaded.");
    error.hidden = false;
  });
  update();
}

// "System prompt" in a conversation's menu: a dialog to read and change the conversation's own system
// prompt (PATCH /chat/api/conversations/<id> {"system_prompt"}). The next answer uses it, after the
// site's prompt and the person's custom instructions; the server decides the limits (the longest prompt,
// CHAT_MAX_SYSTEM_PROMPT_CHARS, from the page's bootstrap `limits.system_prompt_chars`, passed in as `maxChars`).
import { el } from "./dom.js";

export function openSystemPromptDialog({ api, conversation, title, maxChars, returnFocus = () => null,
  onSaved = () => {} }) {
  const MAX = maxChars;
  const area = el("textarea", { id: "system-prompt-text", dir: "auto", rows: "7", maxlength: String(MAX),
    placeholder: "For example: You are a patient maths tutor. Ask one question at a time.",
    "aria-describedby": "system-prompt-help" });
  const count = el("span", { class: "prompt-count", "aria-live": "off" });
  const error = el("p", { class: "share-error", role: "alert", hidden: true });
  const cancel = el("button", { type: "button", class: "secondary", text: "Cancel" });
  const save = el("button", { type: "button", text: "Save" });
  const dialog = el("dialog", { class: "confirm prompt-dialog", "aria-labelledby": "system-prompt-title" },
    el("h2", { id: "system-prompt-title" }, "System prompt for “", el("span", { class: "share-name", text: title }), "”"),
    el("label", { for: "system-prompt-text", class: "visually-hidden", text: "System prompt" }),
    area,
    el("p", { id: "system-prompt-help", class: "prompt-help" },
      "Used from the next answer in this chat only, after your ", el("a", { href: "/settings/", text: "custom instructions" }),
      ". Leave it empty for none. ", count),
    error,
    el("div", { class: "confirm-buttons" }, cancel, save));

  const update = () => { count.textContent = `${area.value.length.toLocaleString()} / ${MAX.toLocaleString()}`; };
  area.addEventListener("input", update);

  function finish() { dialog.close(); }
  dialog.addEventListener("close", () => { dialog.remove(); returnFocus()?.focus(); });
  cancel.addEventListener("click", finish);
  save.addEventListener("click", async () => {
    save.disabled = true;
    error.hidden = true;
    try {
      const updated = await api.updateConversation(conversation.id, { system_prompt: area.value });
      onSaved(updated);
      finish();
    } catch (problem) {
      error.textContent = problem.message || "That did not work. Try again.";
      error.hidden = false;
    } finally { save.disabled = false; }
  });

  document.body.append(dialog);
  area.disabled = true;
  dialog.showModal();
  api.conversation(conversation.id, null, null, { limit: 1 }).then((data) => {
    area.value = data.conversation.system_prompt || "";
    area.disabled = false;
    update();
    area.focus();
  }, (problem) => {
    error.textContent = problem.message || "The system prompt could not be loaded.";
    error.hidden = false;
  });
  update();
}

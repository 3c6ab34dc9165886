// "Share" in a conversation's menu: a small dialog that makes, updates, copies and revokes the
// conversation's read-only link (GET/POST/DELETE /chat/api/conversations/<id>/share, see
// docs/chat-protocol.md). The server decides every rule; this only shows the link and the choices.
/* global gettext, pgettext, interpolate */
import { el, icon, copyText, parts } from "./dom.js";

const MODES = [
  ["snapshot", pgettext("shared link", "Snapshot"), gettext("The chat as it is now. What you add later stays private.")],
  ["live", pgettext("shared link", "Live"), gettext("Follows the chat as it goes on, always its latest version.")],
];

/** The branch on screen, when the shared conversation is the one open (`?leaf=` in the address). */
function leafOnScreen(conversationId) {
  const match = location.pathname.match(/^\/c\/(\d+)\/?$/);
  if (!match || Number(match[1]) !== conversationId) return null;
  return Number(new URLSearchParams(location.search).get("leaf")) || null;
}

export function openShareDialog({ api, conversation, title, returnFocus = () => null }) {
  const heading = el("h2", { id: "share-dialog-title" },
    ...parts(gettext("Share “%(title)s”"), { title: el("span", { class: "share-name", text: title }) }));
  const radios = MODES.map(([value]) => el("input", { type: "radio", name: "share-mode", value }));
  const modes = el("fieldset", { class: "share-modes" },
    el("legend", { class: "visually-hidden", text: gettext("What the link shows") }),
    ...MODES.map(([, label, hint], n) => el("label", { class: "share-mode" }, radios[n],
      el("span", {}, el("strong", { text: label }), el("span", { class: "share-hint", text: hint })))));
  const showName = el("input", { type: "checkbox", id: "share-show-name" });
  const nameLabel = el("label", { for: "share-show-name" });
  // Off by default: the page names the files an answer cites, and quotes them only if the owner says so.
  const showPassages = el("input", { type: "checkbox", id: "share-show-passages" });
  const passagesLabel = el("label", { for: "share-show-passages" },
    gettext("Show the quoted passages from your files"),
    // Translators: follows "Show the quoted passages from your files", in smaller type.
    el("span", { class: "share-hint", text: ` ${gettext("— otherwise only the file names and pages are shown")}` }));
  const url = el("input", { type: "text", id: "share-url", readonly: true, "aria-label": gettext("Link to this chat"), spellcheck: "false" });
  const copy = el("button", { type: "button", class: "secondary share-copy" }, icon("copy"), el("span", { text: gettext("Copy link") }));
  const linkRow = el("div", { class: "share-link", hidden: true }, url, copy);
  const error = el("p", { class: "share-error", role: "alert", hidden: true });
  const status = el("p", { class: "share-status", role: "status" });
  const revoke = el("button", { type: "button", class: "link-danger", hidden: true, text: gettext("Revoke link") });
  const close = el("button", { type: "button", class: "secondary", text: gettext("Close") });
  const save = el("button", { type: "button", class: "share-save", text: gettext("Create link") });
  const dialog = el("dialog", { class: "confirm share-dialog", "aria-labelledby": "share-dialog-title" },
    heading,
    el("p", { class: "share-lead", text: gettext("Anyone with the link can read this chat without signing in. Only finished answers are shown; your email never is.") }),
    modes,
    el("div", { class: "share-option" }, showName, nameLabel),
    el("div", { class: "share-option" }, showPassages, passagesLabel),
    linkRow, error, status,
    el("div", { class: "confirm-buttons share-buttons" }, revoke, close, save));

  let share = null;
  let busy = false;

  function setBusy(value) {
    busy = value;
    for (const control of [save, revoke, ...radios, showName, showPassages]) control.disabled = value;
    showName.disabled = value || showName.dataset.noName === "true";
  }

  function fail(problem) {
    error.textContent = problem.message || gettext("That did not work. Try again.");
    error.hidden = false;
  }

  function render(ownerName) {
    if (ownerName !== undefined) {
      nameLabel.textContent = ownerName ? interpolate(gettext("Show my name (%(name)s)"), { name: ownerName }, true)
        : gettext("Show my name");
      showName.dataset.noName = String(!ownerName);
      showName.disabled = !ownerName;
      if (!ownerName) {
        // Translators: follows "Show my name", in smaller type.
        nameLabel.append(el("span", { class: "share-hint", text: ` ${gettext("— you have no display name, so none is shown")}` }));
      }
    }
    const mode = share ? share.mode : "snapshot";
    for (const radio of radios) radio.checked = radio.value === mode;
    showName.checked = Boolean(share && share.show_owner_name);
    showPassages.checked = Boolean(share && share.show_passages);
    linkRow.hidden = !share;
    revoke.hidden = !share;
    url.value = share ? share.url : "";
    save.textContent = share ? gettext("Update link") : gettext("Create link");
    save.title = share ? gettext("Keep this link; share the chat as it is now, with these choices") : "";
  }

  async function submit() {
    if (busy) return;
    error.hidden = true;
    setBusy(true);
    const existed = Boolean(share);
    try {
      const body = {
        mode: radios.find((r) => r.checked)?.value || "snapshot",
        show_owner_name: showName.checked,
        show_passages: showPassages.checked,
        leaf_id: leafOnScreen(conversation.id),
      };
      const data = await api.saveShare(conversation.id, body);
      share = data.share;
      setBusy(false);
      render();
      status.textContent = existed ? gettext("Link updated.") : gettext("Link created. Copy it and send it to anyone.");
      copy.focus();
    } catch (problem) { setBusy(false); fail(problem); }
  }

  async function revokeLink() {
    if (busy) return;
    error.hidden = true;
    setBusy(true);
    try {
      await api.revokeShare(conversation.id);
      share = null;
      setBusy(false);
      render();
      status.textContent = gettext("Link revoked. It no longer works.");
      save.focus();
    } catch (problem) { setBusy(false); fail(problem); }
  }

  save.addEventListener("click", submit);
  revoke.addEventListener("click", revokeLink);
  close.addEventListener("click", () => dialog.close());
  copy.addEventListener("click", () => copyText(url.value, copy));
  url.addEventListener("focus", () => url.select());
  dialog.addEventListener("close", () => { dialog.remove(); returnFocus()?.focus(); });

  (document.getElementById("main") || document.body).append(dialog);
  nameLabel.textContent = gettext("Show my name");
  setBusy(true);
  render();
  dialog.showModal();
  close.focus();
  api.share(conversation.id).then((data) => {
    share = data.share;
    setBusy(false);
    render(data.owner_name);
    (share ? copy : save).focus();
  }, (problem) => { setBusy(false); fail(problem); });
}

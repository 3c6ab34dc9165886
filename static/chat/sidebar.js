// The conversation list: search (titles and message text, server-side), pin, rename, share (share.js), the
// conversation's system prompt (prompt.js), archive and unarchive, delete with a confirmation dialog, and a live
// "generating" dot fed by the WebSocket. A toggle under the list switches between current and archived chats.
/* global gettext, pgettext, interpolate */
import { el, icon, iconButton } from "./dom.js";
import { openShareDialog } from "./share.js";
import { openSystemPromptDialog } from "./prompt.js";

const DAY = 86400000;

// The list's groups: the key names the heading's id (conv-group-<key>), the label is what it says.
const GROUPS = {
  "pinned": pgettext("conversations", "Pinned"),
  "today": gettext("Today"),
  "yesterday": gettext("Yesterday"),
  "previous-7-days": gettext("Previous 7 days"),
  "previous-30-days": gettext("Previous 30 days"),
  "older": gettext("Older"),
  "archived": pgettext("conversations", "Archived"),
};

function groupOf(conversation, now) {
  if (conversation.pinned) return "pinned";
  const updated = new Date(conversation.updated);
  const startOfToday = new Date(now.getFullYear(), now.getMonth(), now.getDate()).getTime();
  const t = updated.getTime();
  if (t >= startOfToday) return "today";
  if (t >= startOfToday - DAY) return "yesterday";
  if (t >= startOfToday - 7 * DAY) return "previous-7-days";
  if (t >= startOfToday - 30 * DAY) return "previous-30-days";
  return "older";
}

export function displayTitle(conversation) {
  return (conversation && conversation.title && conversation.title.trim()) || gettext("New chat");
}

export function createSidebar({ api, onOpen, onNew, onDeleted, onRenamed, onChanged = () => {}, onError,
  systemPromptChars }) {
  const list = document.getElementById("conv-list");
  const empty = document.getElementById("conv-empty");
  const search = document.getElementById("conv-search");
  const archivedToggle = document.getElementById("conv-archived-toggle");
  let showArchived = false; // the list shows archived chats instead of current ones
  const dialog = document.getElementById("delete-dialog");
  const dialogName = document.getElementById("delete-dialog-name");

  let conversations = [];
  let activeId = null;
  let query = "";
  let openMenu = null;
  let renaming = false;
  let stale = false; // a re-render waits while a menu or a rename field is open
  const generating = new Map(); // conversation id -> Set of message ids generating now
  let liveKnown = false; // once the WebSocket said hello, it is the source of truth

  const isGenerating = (c) => (liveKnown ? (generating.get(c.id)?.size || 0) > 0 : c.generating);

  function closeMenu({ focus = false } = {}) {
    if (!openMenu) return;
    const { menu, button } = openMenu;
    menu.remove();
    button.setAttribute("aria-expanded", "false");
    openMenu = null;
    if (stale) render();
    if (focus) list.querySelector(`[data-id="${button.dataset.for}"] .conv-more`)?.focus();
  }

  function startRename(conversation) {
    closeMenu();
    const link = list.querySelector(`[data-id="${conversation.id}"] .conv-link`);
    if (!link) return;
    renaming = true;
    const input = el("input", { type: "text", class: "conv-rename", "aria-label": gettext("New name for this chat"), maxlength: "200" });
    input.value = conversation.title || "";
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const title = input.value.trim();
      input.replaceWith(link);
      renaming = false;
      if (stale) render();
      if (save && title && title !== conversation.title) {
        try {
          const updated = await api.updateConversation(conversation.id, { title });
          upsert(updated);
          onRenamed(updated);
        } catch (error) { onError(error); }
      }
      list.querySelector(`[data-id="${conversation.id}"] .conv-link`)?.focus();
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); finish(true); }
      if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); finish(false); }
    });
    input.addEventListener("blur", () => finish(true));
    link.replaceWith(input);
    input.focus();
    input.select();
  }

  async function togglePin(conversation) {
    closeMenu();
    try {
      upsert(await api.updateConversation(conversation.id, { pinned: !conversation.pinned }));
      list.querySelector(`[data-id="${conversation.id}"] .conv-link`)?.focus();
    } catch (error) { onError(error); }
  }

  function share(conversation) {
    closeMenu();
    openShareDialog({ api, conversation, title: displayTitle(conversation),
      returnFocus: () => list.querySelector(`[data-id="${conversation.id}"] .conv-more`) });
  }

  function editSystemPrompt(conversation) {
    closeMenu();
    openSystemPromptDialog({ api, conversation, title: displayTitle(conversation), maxChars: systemPromptChars,
      returnFocus: () => list.querySelector(`[data-id="${conversation.id}"] .conv-more`),
      onSaved: (updated) => { upsert(updated); onChanged(updated, "system_prompt"); } });
  }

  async function toggleArchive(conversation) {
    closeMenu();
    try {
      const updated = await api.updateConversation(conversation.id, { archived: !conversation.archived });
      upsert(updated); // it leaves this list: archived chats live under "Archived chats"
      onChanged(updated, "archived");
    } catch (error) { onError(error); }
  }

  function confirmDelete(conversation) {
    closeMenu();
    const returnFocus = () => list.querySelector(`[data-id="${conversation.id}"] .conv-more`);
    dialogName.textContent = displayTitle(conversation);
    dialog.returnValue = "";
    dialog.showModal();
    dialog.addEventListener("close", async () => {
      if (dialog.returnValue !== "delete") { returnFocus()?.focus(); return; }
      try {
        await api.deleteConversation(conversation.id);
        conversations = conversations.filter((c) => c.id !== conversation.id);
        render();
        onDeleted(conversation.id);
      } catch (error) { onError(error); }
    }, { once: true });
  }

  function showMenu(item, button, conversation) {
    if (openMenu && openMenu.button === button) { closeMenu({ focus: true }); return; }
    if (openMenu) closeMenu();
    if (!button.isConnected) return;
    const menu = el("div", { class: "conv-menu", role: "menu",
      "aria-label": interpolate(gettext("Options for %(title)s"), { title: displayTitle(conversation) }, true) },
      el("button", { type: "button", role: "menuitem", onclick: () => startRename(conversation) }, icon("edit"),
        gettext("Rename")),
      el("button", { type: "button", role: "menuitem", onclick: () => togglePin(conversation) },
        icon("pin"), conversation.pinned ? gettext("Unpin") : pgettext("verb", "Pin")),
      el("button", { type: "button", role: "menuitem", onclick: () => share(conversation) }, icon("share"),
        pgettext("verb", "Share")),
      el("button", { type: "button", role: "menuitem", onclick: () => editSystemPrompt(conversation) },
        icon("prompt"), gettext("System prompt")),
      el("button", { type: "button", role: "menuitem", onclick: () => toggleArchive(conversation) },
        icon("archive"), conversation.archived ? gettext("Unarchive") : pgettext("verb", "Archive")),
      // Exports are plain downloads (the session cookie authorizes them), so links, not fetches.
      el("a", { role: "menuitem", href: api.exportUrl(conversation.id, "md"), download: true, onclick: () => closeMenu() },
        icon("download"), gettext("Export as Markdown")),
      el("a", { role: "menuitem", href: api.exportUrl(conversation.id, "json"), download: true, onclick: () => closeMenu() },
        icon("download"), gettext("Export as JSON")),
      el("button", { type: "button", role: "menuitem", class: "danger-item", onclick: () => confirmDelete(conversation) },
        icon("trash"), gettext("Delete")),
    );
    menu.addEventListener("keydown", (e) => {
      const items = [...menu.querySelectorAll("[role=menuitem]")];
      const at = items.indexOf(document.activeElement);
      if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); closeMenu({ focus: true }); }
      else if (e.key === "ArrowDown") { e.preventDefault(); items[(at + 1) % items.length].focus(); }
      else if (e.key === "ArrowUp") { e.preventDefault(); items[(at - 1 + items.length) % items.length].focus(); }
      else if (e.key === "Tab") closeMenu();
    });
    item.append(menu);
    button.setAttribute("aria-expanded", "true");
    openMenu = { menu, button };
    menu.querySelector("[role=menuitem]").focus();
  }

  function itemFor(conversation) {
    const title = displayTitle(conversation);
    const busy = isGenerating(conversation);
    const link = el("a", {
      class: "conv-link", href: `/c/${conversation.id}/`,
      "aria-current": conversation.id === activeId ? "page" : null,
      onclick: (e) => {
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return; // new tab etc.
        e.preventDefault();
        onOpen(conversation.id);
      },
    },
    conversation.pinned ? icon("pin") : null,
    el("span", { class: "conv-title", text: title, dir: "auto" }),
    busy ? el("span", { class: "gen-dot", title: gettext("Generating") },
      el("span", { class: "visually-hidden", text: ` ${gettext("(generating)")}` })) : null);
    const menuButton = el("button", {
      type: "button", class: "conv-more", "aria-label": interpolate(gettext("Options for %(title)s"), { title }, true),
      title: gettext("Options"),
      "aria-haspopup": "menu", "aria-expanded": "false", dataset: { for: String(conversation.id) },
    }, icon("more"));
    const item = el("li", {
      class: "conv-item" + (conversation.id === activeId ? " active" : ""),
      dataset: { id: String(conversation.id), generating: String(busy) },
    }, link, menuButton);
    menuButton.addEventListener("click", () => showMenu(item, menuButton, conversation));
    return item;
  }

  function render() {
    if (openMenu || renaming) { stale = true; return; }
    stale = false;
    list.replaceChildren();
    const now = new Date();
    let group = null;
    let ul = null;
    for (const conversation of conversations) {
      const key = showArchived ? "archived" : groupOf(conversation, now);
      if (key !== group) {
        group = key;
        const headingId = `conv-group-${key}`;
        ul = el("ul", { class: "conv-group", "aria-labelledby": headingId });
        list.append(el("h2", { class: "conv-group-title", id: headingId, text: GROUPS[key] }), ul);
      }
      ul.append(itemFor(conversation));
    }
    empty.hidden = conversations.length > 0;
    empty.textContent = query
      ? interpolate(showArchived ? gettext("No archived chats match “%(query)s”.") : gettext("No chats match “%(query)s”."),
        { query }, true)
      : showArchived ? gettext("No archived chats. Archive a chat from its menu to put it away here.")
        : gettext("No chats yet. Your conversations will appear here.");
    archivedToggle.setAttribute("aria-pressed", String(showArchived));
    archivedToggle.querySelector("span").textContent = showArchived ? gettext("Back to chats") : gettext("Archived chats");
  }

  async function refresh() {
    try {
      const data = await api.conversations(query, { archived: showArchived });
      conversations = data.conversations;
      render();
    } catch (error) { onError(error); }
  }

  function upsert(conversation) {
    const at = conversations.findIndex((c) => c.id === conversation.id);
    if (conversation.archived !== undefined && conversation.archived !== showArchived) {
      if (at >= 0) { conversations.splice(at, 1); render(); }
      return;
    }
    if (at >= 0) conversations[at] = { ...conversations[at], ...conversation };
    else if (!query) conversations.unshift(conversation);
    conversations.sort((a, b) => (b.pinned - a.pinned) || (new Date(b.updated) - new Date(a.updated)));
    render();
  }

  let timer = null;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => { query = search.value.trim(); refresh(); }, 250);
  });
  search.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && search.value) { e.stopPropagation(); search.value = ""; query = ""; refresh(); }
  });
  document.getElementById("new-chat").addEventListener("click", () => onNew());
  archivedToggle.addEventListener("click", () => { showArchived = !showArchived; conversations = []; render(); refresh(); });
  document.addEventListener("click", (e) => {
    if (openMenu && !openMenu.menu.contains(e.target) && e.target !== openMenu.button && !openMenu.button.contains(e.target)) closeMenu();
  });

  return {
    refresh,
    upsert,
    get: (id) => conversations.find((c) => c.id === id),
    setActive(id) { activeId = id; render(); },
    setSnapshot(entries) {
      liveKnown = true;
      generating.clear();
      for (const { conversation_id: c, message_id: m } of entries) {
        if (!generating.has(c)) generating.set(c, new Set());
        generating.get(c).add(m);
      }
      render();
    },
    setGenerating({ conversation_id: c, message_id: m, active }) {
      liveKnown = true;
      if (!generating.has(c)) generating.set(c, new Set());
      if (active) generating.get(c).add(m); else generating.get(c).delete(m);
      // A conversation started in another tab is not in this list yet: fetch it.
      if (active && !conversations.some((x) => x.id === c)) refresh();
      else render();
    },
  };
}

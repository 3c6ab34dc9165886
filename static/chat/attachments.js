// Files in the composer: the paperclip's menu uploads files (or drop them on the message box) and
// picks the collections the chat uses. A file's chip shows it being read and indexed (polled once a
// second) with a button to cancel, or why it failed; a file that is ready goes with the next message
// (document_ids). Files already in the conversation and the collections it uses are chips too:
// every answer in it can cite them. A new chat's collections go with its first message. A picture
// (PNG, JPEG, WebP, GIF) always waits for the next message, whose bubble then shows it: it goes to the
// model with that message rather than being read.
/* global gettext, ngettext, interpolate */
import { el, icon, formatNumber, pageLanguage } from "./dom.js";

function progressText(doc) {
  if (doc.kind === "image") return gettext("Picture");
  if (doc.state === "embedding" && doc.chunks_total) {
    // The percentage as the page's language writes it ("42%", "42 %"...).
    const done = Math.floor((100 * doc.chunks_done) / doc.chunks_total) / 100;
    const percent = new Intl.NumberFormat(pageLanguage(), { style: "percent", maximumFractionDigits: 0 }).format(done);
    return interpolate(gettext("Indexing %(percent)s"), { percent }, true);
  }
  if (doc.state === "ready") {
    return doc.pages
      ? interpolate(ngettext("%(count)s page", "%(count)s pages", doc.pages), { count: formatNumber(doc.pages) }, true)
      : gettext("Ready");
  }
  if (doc.state === "failed") return doc.failure || gettext("Failed");
  return doc.state_label;
}

function filesCount(n) {
  return interpolate(ngettext("%(count)s file", "%(count)s files", n), { count: formatNumber(n) }, true);
}

export function createAttachments({ api, onChange, onError }) {
  const list = document.getElementById("attachments");
  const input = document.getElementById("attach-input");
  const button = document.getElementById("attach");
  const menu = document.getElementById("attach-menu");
  const form = document.getElementById("composer");
  let pending = []; // uploaded for the next message: {id?, name, state, ...}
  let attached = []; // already the conversation's
  let conversationId = null;
  let collections = []; // the person's: {id, name, files, ready_files}
  let using = []; // ids of the collections this chat uses (or will, for a new chat)
  let timer = null;

  function chip(doc, { removable }) {
    const busy = doc.in_progress;
    const label = progressText(doc);
    const actions = [];
    if (busy && doc.id) {
      actions.push(el("button", { type: "button", class: "chip-btn", "aria-label": interpolate(gettext("Cancel reading %(name)s"), { name: doc.name }, true), title: gettext("Cancel"),
        onclick: () => cancel(doc) }, icon("close")));
    } else if (removable) {
      actions.push(el("button", { type: "button", class: "chip-btn", "aria-label": interpolate(gettext("Remove %(name)s"), { name: doc.name }, true), title: gettext("Remove"),
        onclick: () => remove(doc) }, icon("close")));
    }
    let bar = null;
    if (busy && doc.chunks_total) {
      bar = el("span", { class: "chip-bar", "aria-hidden": "true" });
      // Through the CSSOM: the policy (style-src 'self') refuses style attributes.
      bar.style.setProperty("--done", `${(100 * doc.chunks_done) / doc.chunks_total}%`);
    }
    const thumbnail = doc.picture_url ? el("img", { class: "chip-thumb", src: doc.picture_url, alt: "" }) : null;
    return el("li", { class: `chip state-${doc.state}`, dataset: { id: String(doc.id ?? "") }, title: doc.failure || doc.name },
      thumbnail || icon(doc.state === "failed" ? "alert" : "file"),
      el("span", { class: "chip-name", text: doc.name, dir: "auto" }),
      el("span", { class: "chip-state", text: label, role: doc.state === "failed" ? "alert" : null }),
      bar, ...actions);
  }

  function collectionChip(collection) {
    return el("li", { class: "chip chip-collection", dataset: { collection: String(collection.id) } },
      icon("books"),
      el("span", { class: "chip-name", text: collection.name, dir: "auto" }),
      el("span", { class: "chip-state", text: filesCount(collection.ready_files ?? 0) }),
      el("button", { type: "button", class: "chip-btn",
        "aria-label": interpolate(gettext("Stop using %(name)s in this chat"), { name: collection.name }, true),
        title: gettext("Stop using"), onclick: () => toggleCollection(collection.id, false) }, icon("close")));
  }

  function render() {
    const used = using.map((id) => collections.find((c) => c.id === id)).filter(Boolean);
    list.replaceChildren(
      ...used.map(collectionChip),
      ...attached.map((d) => chip(d, { removable: false })),
      ...pending.map((d) => chip(d, { removable: true })));
    list.hidden = !used.length && !attached.length && !pending.length;
    const waiting = [...pending, ...attached].some((d) => d.in_progress);
    if (waiting && !timer) timer = setInterval(poll, 1000);
    if (!waiting && timer) { clearInterval(timer); timer = null; }
    onChange();
  }

  async function poll() {
    const ids = [...pending, ...attached].filter((d) => d.id && d.in_progress).map((d) => d.id);
    if (!ids.length) { render(); return; }
    try {
      const { documents } = await api.files(ids);
      const byId = new Map(documents.map((d) => [d.id, d]));
      pending = pending.map((d) => byId.get(d.id) || d);
      attached = attached.map((d) => byId.get(d.id) || d);
      render();
    } catch { /* try again on the next tick */ }
  }

  async function upload(file) {
    const placeholder = { id: null, name: file.name, state: "queued", state_label: gettext("Uploading…"), in_progress: true };
    pending.push(placeholder);
    render();
    const body = new FormData();
    body.append("file", file);
    if (conversationId) body.append("conversation_id", String(conversationId));
    try {
      const doc = await api.uploadFile(body);
      if (conversationId && doc.conversation_id === conversationId) { // a picture never is: it waits for the message
        pending = pending.filter((d) => d !== placeholder);
        attached.push(doc);
      } else {
        pending = pending.map((d) => (d === placeholder ? doc : d));
      }
    } catch (error) {
      pending = pending.filter((d) => d !== placeholder);
      onError(interpolate(gettext("%(name)s: %(problem)s"), { name: file.name, problem: error.message }, true));
    }
    render();
  }

  async function cancel(doc) {
    try {
      const next = await api.cancelFile(doc.id);
      pending = pending.map((d) => (d.id === doc.id ? next : d));
      attached = attached.map((d) => (d.id === doc.id ? next : d));
    } catch (error) { onError(error.message); }
    render();
  }

  async function remove(doc) {
    pending = pending.filter((d) => d !== doc);
    render();
    if (doc.id) {
      try { await api.deleteFile(doc.id); } catch { /* it stays unattached; the files page lists it */ }
    }
  }

  function accept(files) { for (const file of files) upload(file); }

  async function toggleCollection(id, on) {
    const before = using;
    using = on ? [...new Set([...using, id])] : using.filter((c) => c !== id);
    render();
    if (!conversationId) return; // a new chat: they go with its first message
    try {
      await api.updateConversation(conversationId, { collection_ids: using });
    } catch (error) {
      using = before;
      render();
      onError(error.message);
    }
  }

  async function loadCollections() {
    try { collections = (await api.collections()).collections; } catch { collections = []; }
  }

  function closeMenu() {
    menu.hidden = true;
    button.setAttribute("aria-expanded", "false");
  }

  async function openMenu() {
    await loadCollections();
    const items = collections.map((c) => {
      const box = el("input", { type: "checkbox", id: `use-collection-${c.id}`, checked: using.includes(c.id) || null,
        onchange: (e) => toggleCollection(c.id, e.currentTarget.checked) });
      return el("li", {}, el("label", { for: `use-collection-${c.id}`, class: "menu-check" }, box,
        el("span", { text: c.name, dir: "auto" }),
        el("span", { class: "menu-note", text: filesCount(c.ready_files ?? 0) })));
    });
    menu.replaceChildren(
      el("button", { type: "button", class: "menu-item", role: "menuitem", onclick: () => { closeMenu(); input.click(); } },
        icon("paperclip"), el("span", { text: gettext("Upload files") })),
      el("p", { class: "menu-title", text: gettext("Use a collection") }),
      items.length ? el("ul", { class: "menu-list" }, ...items)
        : el("p", { class: "menu-note", text: gettext("You have no collections yet.") }),
      el("a", { class: "menu-item", href: "/accounts/files/" }, icon("file"), el("span", { text: gettext("Manage files and collections") })));
    menu.hidden = false;
    button.setAttribute("aria-expanded", "true");
    menu.querySelector("button, input, a").focus();
  }

  button.addEventListener("click", () => (menu.hidden ? openMenu() : closeMenu()));
  document.addEventListener("click", (e) => { if (!menu.hidden && !menu.contains(e.target) && !button.contains(e.target)) closeMenu(); });
  menu.addEventListener("keydown", (e) => { if (e.key === "Escape") { e.stopPropagation(); closeMenu(); button.focus(); } });
  input.addEventListener("change", () => { accept([...input.files]); input.value = ""; });
  for (const type of ["dragenter", "dragover"]) {
    form.addEventListener(type, (e) => {
      if (![...(e.dataTransfer?.types || [])].includes("Files")) return;
      e.preventDefault();
      form.dataset.dropping = "true";
    });
  }
  form.addEventListener("dragleave", (e) => { if (!form.contains(e.relatedTarget)) delete form.dataset.dropping; });
  form.addEventListener("drop", (e) => {
    if (!e.dataTransfer?.files?.length) return;
    e.preventDefault();
    delete form.dataset.dropping;
    accept([...e.dataTransfer.files]);
  });

  return {
    /** The files to send with the next message: uploaded and ready. */
    readyIds: () => pending.filter((d) => d.id && d.state === "ready").map((d) => d.id),
    /** A file is still being uploaded or read: the name of the first, for the composer's hint. */
    waitingFor: () => (pending.find((d) => d.in_progress) || null)?.name ?? null,
    /** The collections a new chat is to use (sent with its first message), or null for an open chat. */
    collectionIds: () => (conversationId ? null : using),
    /** The message was sent: its files are the conversation's now. */
    sent(id) {
      attached.push(...pending.filter((d) => d.state === "ready" && d.kind !== "image").map((d) => ({ ...d, conversation_id: id })));
      pending = pending.filter((d) => d.state !== "ready" && d.state !== "failed" && d.state !== "cancelled");
      conversationId = id;
      render();
    },
    /** Another conversation is open (null: a new chat) with these files and collections. */
    async show(id, documents = [], collectionIds = []) {
      conversationId = id;
      attached = documents;
      using = collectionIds;
      if (using.length && !collections.length) await loadCollections();
      if (id) pending = pending.filter((d) => d.in_progress || d.state === "ready");
      render();
    },
  };
}

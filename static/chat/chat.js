// The chat page: wires the sidebar, the thread, the composer, SSE streams and the live socket.
// State is small and lives here; the other modules render and report user intent back.
/* global gettext, ngettext, interpolate */
import { ApiError, createApi } from "./api.js";
import { createLayout } from "./layout.js";
import { createRefusals } from "./refusals.js";
import { attachStream } from "./stream.js";
import { connectLive } from "./live.js";
import { createSidebar, displayTitle } from "./sidebar.js";
import { createComposer } from "./composer.js";
import { createAttachments } from "./attachments.js";
import { createPassagePanel } from "./passages.js";
import { ACTIVE, emptyState, messageView } from "./render.js";
import { createFeedback } from "./feedback.js";
import { createReport } from "./report.js";
import { openSystemPromptDialog } from "./prompt.js";
import { copyText, formatNumber } from "./dom.js";

const boot = JSON.parse(document.getElementById("chat-bootstrap").textContent);
const api = createApi(boot.api_base);
const app = document.getElementById("main");
const siteName = app.dataset.siteName || gettext("Assistant");
const thread = document.getElementById("thread");
const scroller = document.getElementById("messages");
const title = document.getElementById("convo-title");
const picker = document.getElementById("model-picker");
const announcer = document.getElementById("announcer");
const jump = document.getElementById("jump-latest");

const state = {
  conversationId: boot.conversation_id,
  conversation: null,
  messages: [],
  hasEarlier: false, // the conversation has messages before the first one loaded
  views: new Map(), // message id -> view
  texts: new Map(), // message id -> streamed text so far
  streams: new Map(), // message id -> SSE handle
  stopping: new Set(),
  admitting: false, // a send/regenerate/edit is on its way: live frames about it are expected
  loadSeq: 0,
};

// ---- small helpers ---------------------------------------------------------------------------

function announce(text) {
  announcer.textContent = "";
  setTimeout(() => { announcer.textContent = text; }, 50); // a fresh node change is re-announced
}

let stick = true; // follow the answer while the reader is at the bottom
scroller.addEventListener("scroll", () => {
  stick = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
  jump.hidden = stick;
});
// Someone writing in the thread (a comment or a report under an answer) keeps their place while an answer streams below.
const writingInThread = () => thread.contains(document.activeElement) && document.activeElement.matches("textarea");
function toBottom(force = false) {
  if (!force && writingInThread()) return;
  if (force || stick) { scroller.scrollTop = scroller.scrollHeight; stick = true; jump.hidden = true; }
}
jump.addEventListener("click", () => { toBottom(true); document.getElementById("prompt").focus(); });

const leafFromUrl = () => Number(new URLSearchParams(location.search).get("leaf")) || null;

function setUrl(id, leaf, { push = false } = {}) {
  const url = id ? `/c/${id}/${leaf ? `?leaf=${leaf}` : ""}` : "/";
  if (url === location.pathname + location.search) return;
  history[push ? "pushState" : "replaceState"]({ id, leaf }, "", url);
}

const archivedBadge = document.getElementById("convo-archived");
const promptSign = document.getElementById("convo-prompt");

/** The header: the chat's title, whether it is archived, whether it has its own system prompt. */
function setTitle(conversation) {
  const name = conversation ? displayTitle(conversation) : gettext("New chat");
  title.textContent = name;
  archivedBadge.hidden = !(conversation && conversation.archived);
  promptSign.hidden = !(conversation && conversation.has_system_prompt);
  document.title = `${name} · ${siteName}`;
}

function activeMessage() {
  return state.messages.find((m) => m.role === "assistant" && ACTIVE.has(m.status)) || null;
}

function syncComposerMode() {
  if (state.admitting) return;
  const active = activeMessage();
  composer.setMode(active ? (state.stopping.has(active.id) ? "stopping" : "streaming") : "idle");
}

// ---- admissions ----------------------------------------------------------------------------------

/** Send, regenerate, continue or edit through the refusal handling; live frames about it are expected meanwhile. */
async function admit(call) {
  state.admitting = true;
  try {
    return await refusals.admit(call);
  } finally {
    state.admitting = false;
    syncComposerMode();
  }
}

const showRefusal = (error) => refusals.show(error);

// ---- the thread --------------------------------------------------------------------------------

const viewContext = {
  siteName,
  onPainted: () => toBottom(),
  feedback: createFeedback({ api, onError: (error) => showRefusal(error), announce: (text) => announce(text) }),
  report: createReport({ api, announce: (text) => announce(text) }),
  onSwitch: (leaf) => openConversation(state.conversationId, { leaf }),
  onRegenerate: (message) => regenerate(message),
  onContinue: (message) => continueAnswer(message),
  // Auto's larger model ("Retry with the larger model" under an answer Auto gave the small one), if offered.
  larger: (boot.models.find((m) => m.larger) || {}).larger || null,
  onRetryLarger: (message, model) => regenerate(message, model),
  onEdit: (message, text) => edit(message, text),
  onCite: (source, opener) => passages.open(source, opener),
  editable: () => !activeMessage(),
  regenerable: (message) => {
    const last = state.messages[state.messages.length - 1];
    return last && last.id === message.id && !ACTIVE.has(message.status);
  },
};

function renderThread() {
  state.views.clear();
  thread.replaceChildren();
  if (!state.messages.length) {
    thread.append(emptyState(boot.user && boot.user.name, (prompt) => { composer.value = prompt; submit(prompt); }));
    app.dataset.empty = "true";
    return;
  }
  app.dataset.empty = "false";
  if (state.hasEarlier) thread.append(earlierButton());
  for (const message of state.messages) addView(message);
}

// A long conversation arrives newest first, a page at a time; earlier messages load on request.
function earlierButton() {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "load-earlier";
  button.textContent = gettext("Show earlier messages");
  button.addEventListener("click", () => loadEarlier(button));
  return button;
}

async function loadEarlier(button) {
  const id = state.conversationId;
  const first = state.messages[0];
  if (!id || !first) return;
  button.disabled = true;
  button.textContent = gettext("Loading earlier messages…");
  let data;
  try {
    data = await api.conversation(id, leafFromUrl(), first.id);
  } catch (error) {
    button.disabled = false;
    button.textContent = gettext("Show earlier messages");
    showRefusal(error);
    return;
  }
  if (id !== state.conversationId || state.messages[0] !== first) return; // moved on meanwhile
  const fromBottom = scroller.scrollHeight - scroller.scrollTop;
  state.messages = [...data.messages, ...state.messages];
  state.hasEarlier = data.has_earlier;
  renderThread();
  scroller.scrollTop = scroller.scrollHeight - fromBottom; // the reader stays where they were
  const firstNew = state.views.get(data.messages[data.messages.length - 1]?.id);
  firstNew?.root.querySelector("button, a, [tabindex]")?.focus({ preventScroll: true });
}

function addView(message) {
  if (state.views.has(message.id)) return;
  const view = messageView(message, viewContext);
  state.views.set(message.id, view);
  thread.append(view.root);
  if (state.texts.has(message.id)) view.setText(state.texts.get(message.id));
}

/** Re-draw action rows (which message may be regenerated or edited changes as the thread moves). */
function refreshActions() {
  for (const message of state.messages) state.views.get(message.id)?.update(message);
}

function replaceMessage(message) {
  const at = state.messages.findIndex((m) => m.id === message.id);
  if (at >= 0) state.messages[at] = message;
}

// ---- streams -------------------------------------------------------------------------------------

// `sent`: the send's own response, carrying this answer's frames (api.send); else its stream URL is read.
function attach(message, sent = null) {
  if (state.streams.has(message.id)) { sent?.abort(); return; }
  state.texts.set(message.id, "");
  let waiting = false;
  const handle = attachStream(message.stream_url, {
    onBusy({ retry_after: seconds, message: sentence }) {
      waiting = true;
      composer.holdSending({
        seconds, kind: "busy",
        render: (left) => `${sentence} ${interpolate(gettext("Retrying in %(count)s s."), { count: formatNumber(left) }, true)}`,
        spoken: `${sentence} ${interpolate(ngettext("Retrying automatically in %(count)s second.",
          "Retrying automatically in %(count)s seconds.", Math.ceil(seconds)), { count: formatNumber(Math.ceil(seconds)) }, true)}`,
      });
    },
    onDelta(text) {
      if (waiting) { waiting = false; composer.clearNotice(); }
      const next = state.texts.get(message.id) + text;
      state.texts.set(message.id, next);
      state.views.get(message.id)?.setText(next);
    },
    onDone(final) {
      if (waiting) composer.clearNotice();
      finished(final);
    },
    onError(error) {
      state.streams.delete(message.id);
      composer.showNotice({ text: error.message || gettext("This answer could not be streamed.") });
      recover(message.id);
    },
    onLost() {
      state.streams.delete(message.id);
      recover(message.id);
    },
  }, sent);
  state.streams.set(message.id, handle);
}

function finished(final) {
  state.streams.delete(final.id);
  state.texts.delete(final.id);
  state.stopping.delete(final.id);
  replaceMessage(final);
  refreshActions();
  syncComposerMode();
  const words = (state.views.get(final.id)?.root.querySelector(".md")?.textContent || "").trim();
  const clipped = words.length > 1500
    ? interpolate(gettext("%(text)s… (continues in the conversation)"), { text: words.slice(0, 1500) }, true) : words;
  const said = {
    completed: gettext("Answer: %(text)s"),
    stopped: gettext("Answer stopped: %(text)s"),
    failed: gettext("Answer failed. %(reason)s"),
    interrupted: gettext("Answer interrupted. %(reason)s"),
    blocked: gettext("Answer blocked. %(reason)s"),
  }[final.status] || gettext("Answer. %(reason)s");
  announce(interpolate(said, { text: clipped, reason: final.error || "" }, true));
  // A title is made for the conversation after its first answer: pick it up.
  sidebarRefreshSoon();
}

/** The stream is gone (an error, or a non-stream answer): ask the JSON API where the message is. */
async function recover(messageId) {
  const conversationId = state.conversationId;
  await new Promise((r) => setTimeout(r, 1500));
  if (conversationId !== state.conversationId) return;
  try {
    const data = await api.conversation(conversationId, leafFromUrl());
    const fresh = data.messages.find((m) => m.id === messageId);
    if (!fresh) return;
    if (ACTIVE.has(fresh.status)) attach(fresh);
    else finished(fresh);
  } catch (error) {
    // A suspended account is told why; otherwise the conversation is gone and nothing can be recovered.
    if (error instanceof ApiError && error.status === 403) showRefusal(error);
  }
}

function closeStreams() {
  for (const handle of state.streams.values()) handle.close();
  state.streams.clear();
  state.texts.clear();
}

// ---- navigation ------------------------------------------------------------------------------------

async function openConversation(id, { leaf = null, push = false, keepStreams = false } = {}) {
  const seq = ++state.loadSeq;
  let data;
  try {
    data = await api.conversation(id, leaf);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) { newChat({ push: false }); sidebar.refresh(); return; }
    showRefusal(error);
    return;
  }
  if (seq !== state.loadSeq) return; // a later navigation won
  const switching = state.conversationId !== id;
  if (switching || !keepStreams) closeStreams();
  state.conversationId = id;
  state.conversation = data.conversation;
  state.messages = data.messages;
  state.hasEarlier = data.has_earlier;
  state.stopping.clear();
  setUrl(id, leaf, { push });
  setTitle(data.conversation);
  selectModel(data.conversation.model);
  sidebar.setActive(id);
  attachments.show(id, data.conversation.documents || [], data.conversation.collection_ids || []);
  if (switching) { composer.useDraft(id); composer.clearNotice(); }
  renderThread();
  for (const message of state.messages) {
    if (message.role === "assistant" && ACTIVE.has(message.status)) attach(message);
  }
  syncComposerMode();
  toBottom(true);
  closeSidebar();
}

function newChat({ push = true } = {}) {
  ++state.loadSeq;
  closeStreams();
  state.conversationId = null;
  state.conversation = null;
  state.messages = [];
  state.hasEarlier = false;
  setUrl(null, null, { push });
  setTitle(null);
  selectModel(preferredModel());
  sidebar.setActive(null);
  attachments.show(null);
  composer.useDraft(null);
  composer.clearNotice();
  renderThread();
  toBottom(true); // also hides "jump to latest" left over from the previous conversation
  syncComposerMode();
  closeSidebar();
  composer.focus();
}

window.addEventListener("popstate", () => {
  const match = location.pathname.match(/^\/c\/(\d+)\/?$/);
  if (match) openConversation(Number(match[1]), { leaf: leafFromUrl() });
  else newChat({ push: false });
});

// ---- commands -----------------------------------------------------------------------------------------

async function submit(text) {
  const parent = state.messages[state.messages.length - 1];
  const payload = {
    conversation_id: state.conversationId,
    content: text,
    model: picker.value || undefined,
    parent_id: parent ? parent.id : null,
    document_ids: attachments.readyIds(),
    collection_ids: attachments.collectionIds() ?? undefined,
  };
  const turn = await admit(() => api.send(payload));
  if (!turn) { composer.focus(); return; } // refused: the text is still in the box
  attachments.sent(turn.conversation.id);
  const startedNew = !state.conversationId;
  if (startedNew) {
    composer.moveDraft(turn.conversation.id);
    state.conversationId = turn.conversation.id;
    setUrl(turn.conversation.id, null, { push: true });
    sidebar.setActive(turn.conversation.id);
  } else if (leafFromUrl()) {
    setUrl(state.conversationId, null);
  }
  if (composer.value.trim() === text) composer.value = "";
  state.conversation = turn.conversation;
  setTitle(turn.conversation);
  sidebar.upsert(turn.conversation);
  if (!state.messages.length) thread.replaceChildren();
  app.dataset.empty = "false";
  for (const message of [turn.user_message, turn.assistant_message]) {
    if (!state.messages.some((m) => m.id === message.id)) state.messages.push(message);
    addView(message);
  }
  refreshActions();
  syncComposerMode();
  toBottom(true);
  attach(turn.assistant_message, turn.sent);
  announce(gettext("Generating an answer."));
}

// A new version of an answer (regenerated, or continued from where its length limit cut it) is followed
// on the response itself from the start (its text is kept until the branch is drawn), so opening the
// branch finds it attached already.
async function newVersion(call) {
  const turn = await admit(call);
  if (!turn) return;
  attach(turn.assistant_message, turn.sent);
  await openConversation(turn.conversation.id, { leaf: turn.assistant_message.id, keepStreams: true });
}

const regenerate = (message, model) => newVersion(() => api.regenerate(message.id, model));
const continueAnswer = (message) => newVersion(() => api.continueAnswer(message.id));

async function edit(message, text) {
  const turn = await admit(() => api.edit(message.id, text));
  if (!turn) return false;
  attach(turn.assistant_message, turn.sent);
  await openConversation(turn.conversation.id, { leaf: turn.assistant_message.id, keepStreams: true });
  return true;
}

async function stop() {
  const active = activeMessage();
  if (!active || state.stopping.has(active.id)) return;
  state.stopping.add(active.id);
  syncComposerMode();
  try {
    const data = await api.stop(active.id);
    // The stream's `done` event brings the final state; a finished message answers at once.
    if (data && data.message && !ACTIVE.has(data.message.status) && !state.streams.has(active.id)) finished(data.message);
  } catch (error) {
    state.stopping.delete(active.id);
    syncComposerMode();
    showRefusal(error);
  }
}

// ---- model picker -------------------------------------------------------------------------------------

const MODEL_KEY = "sglchat:model";

function preferredModel() {
  // The default model chosen in Settings comes first; then the last one picked on this device.
  if (boot.preferred_model) return boot.preferred_model;
  let saved = null;
  try { saved = localStorage.getItem(MODEL_KEY); } catch { /* ignore */ }
  const ok = boot.models.find((m) => m.id === saved && m.allowed);
  return ok ? ok.id : boot.default_model;
}

function selectModel(id) {
  if (id && [...picker.options].some((o) => o.value === id)) picker.value = id;
}

function buildPicker() {
  picker.replaceChildren();
  for (const model of boot.models) {
    const option = document.createElement("option");
    option.value = model.id;
    option.textContent = model.allowed ? model.name
      : interpolate(gettext("%(model)s — not included in the %(plan)s plan"), { model: model.name, plan: boot.plan.name }, true);
    option.disabled = !model.allowed;
    picker.append(option);
  }
  selectModel(preferredModel());
}

picker.addEventListener("change", async () => {
  try { localStorage.setItem(MODEL_KEY, picker.value); } catch { /* ignore */ }
  if (state.conversationId) {
    try { state.conversation = await api.updateConversation(state.conversationId, { model: picker.value }); }
    catch (error) { showRefusal(error); }
  }
});

// ---- keyboard ------------------------------------------------------------------------------------------------

const layout = createLayout(app);
const closeSidebar = (options) => layout.closeSidebar(options);

// Esc: close what is open first (dialog, menus and edits handle their own), else stop the answer.
document.addEventListener("keydown", (e) => {
  if (e.key !== "Escape" || e.shiftKey || e.defaultPrevented || document.querySelector("dialog[open]")) return;
  if (layout.sidebarCovers()) { closeSidebar({ focus: true }); return; }
  if (activeMessage()) { e.preventDefault(); stop(); }
});

// "?": the keyboard shortcuts (also linked from the composer's hint), when not typing in a box.
const shortcuts = document.getElementById("shortcuts-dialog");
const openShortcuts = () => { if (!shortcuts.open) shortcuts.showModal(); };
document.getElementById("shortcuts-open").addEventListener("click", openShortcuts);
document.addEventListener("keydown", (e) => {
  if (e.key !== "?" || e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
  const target = e.target;
  if (target.closest && target.closest("input, textarea, select, [contenteditable=''], [contenteditable='true']")) return;
  if (document.querySelector("dialog[open]")) return;
  e.preventDefault();
  openShortcuts();
});

// The shortcuts ChatGPT has, so hands that know them work here: Ctrl (⌘ on a Mac) + Shift + O a new chat,
// + Shift + C copy the last answer, Ctrl/⌘ + K search the chats, Shift + Esc back to the message box.
document.addEventListener("keydown", (e) => {
  if (e.defaultPrevented || e.altKey || e.isComposing || document.querySelector("dialog[open]")) return;
  const mod = e.ctrlKey || e.metaKey;
  const key = e.key.toLowerCase();
  if (mod && e.shiftKey && key === "o") { e.preventDefault(); newChat(); }
  else if (mod && e.shiftKey && key === "c") { e.preventDefault(); copyLastAnswer(); }
  else if (mod && !e.shiftKey && key === "k") { e.preventDefault(); layout.openSidebar({ focus: "conv-search" }); }
  else if (!mod && e.shiftKey && e.key === "Escape") { e.preventDefault(); closeSidebar(); composer.focus(); }
});

/** The answer at the end of the conversation on screen, copied; said to screen readers too. */
function copyLastAnswer() {
  const last = [...state.messages].reverse().find((m) => m.role === "assistant" && !ACTIVE.has(m.status) && m.content);
  if (!last) { announce(gettext("There is no answer to copy yet.")); return; }
  const button = thread.querySelector(`article[data-id="${last.id}"] .copy-answer`);
  copyText(last.content, button);
  announce(gettext("Last answer copied."));
}

// ---- wiring -------------------------------------------------------------------------------------------------

const composer = createComposer({ onSubmit: submit, onStop: stop });
const attachments = createAttachments({
  api,
  onChange: () => composer.setWaitingFor(attachments.waitingFor()),
  onError: (text) => composer.showNotice({ kind: "error", text }),
});
const passages = createPassagePanel({ api });
const refusals = createRefusals({ composer, plansUrl: boot.urls && boot.urls.plans });

const sidebar = createSidebar({
  api,
  onOpen: (id) => openConversation(id, { push: true }),
  onNew: () => newChat(),
  onDeleted: (id) => { composer.clearDraftOf(id); if (id === state.conversationId) newChat({ push: false }); },
  onRenamed: (conversation) => { if (conversation.id === state.conversationId) setTitle(conversation); },
  onChanged(conversation, what) {
    if (conversation.id === state.conversationId) {
      state.conversation = { ...state.conversation, ...conversation };
      setTitle(state.conversation);
    }
    if (what === "archived") announce(conversation.archived ? gettext("Chat archived.") : gettext("Chat moved back to your chats."));
  },
  onError: showRefusal,
  systemPromptChars: boot.limits && boot.limits.system_prompt_chars,
});

// The header's sign opens the open chat's system prompt (the dialog confirms a change itself).
promptSign.addEventListener("click", () => {
  const conversation = state.conversation;
  if (!conversation) return;
  openSystemPromptDialog({ api, conversation, title: displayTitle(conversation),
    maxChars: boot.limits && boot.limits.system_prompt_chars,
    returnFocus: () => (promptSign.hidden ? document.getElementById("prompt") : promptSign), // removed: the sign is gone
    onSaved(updated) {
      sidebar.upsert(updated);
      if (updated.id === state.conversationId) { state.conversation = { ...state.conversation, ...updated }; setTitle(state.conversation); }
    } });
});

let refreshTimer = null;
function sidebarRefreshSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(async () => {
    await sidebar.refresh();
    const current = sidebar.get(state.conversationId);
    if (current && state.conversation && current.title !== state.conversation.title) {
      state.conversation = { ...state.conversation, title: current.title };
      setTitle(state.conversation);
    }
  }, 400);
}

connectLive(boot.ws_url, {
  onSnapshot: (entries) => sidebar.setSnapshot(entries),
  onRefused(frame) {
    // A suspension stops every answer of the account, and the socket that would say so is closing.
    if (frame.code === "account_suspended") sidebar.setSnapshot([]);
    showRefusal(new ApiError(frame));
  },
  // A conversation changed: its title written (by a task that may run well after the answer's end),
  // or renamed, pinned or archived in another tab.
  onConversation(conversation) {
    sidebar.upsert(conversation);
    if (conversation.id === state.conversationId && state.conversation) {
      state.conversation = { ...state.conversation, ...conversation };
      setTitle(state.conversation);
    }
  },
  onGenerating(frame) {
    sidebar.setGenerating(frame);
    // Another tab started an answer in the conversation on screen: show it here too.
    const known = state.messages.some((m) => m.id === frame.message_id);
    if (frame.conversation_id === state.conversationId && !known && !state.admitting && frame.active) {
      openConversation(state.conversationId, { keepStreams: true });
    }
    if (!frame.active) sidebarRefreshSoon();
  },
});


buildPicker();
sidebar.refresh();
if (state.conversationId) {
  const first = state.conversationId;
  state.conversationId = null; // so openConversation treats it as a switch (draft, notices)
  openConversation(first, { leaf: leafFromUrl() });
} else {
  newChat({ push: false });
}
app.dataset.ready = "true";

// JSON over HTTP (docs/chat-protocol.md). Every refusal becomes an ApiError carrying the server's
// typed error (code, sentence for people, status, retry_after), so callers can react by code.

/* global gettext, interpolate */
import { readEvents } from "./stream.js";

export class ApiError extends Error {
  constructor({ status, code, message, retryAfter = null, retry_after = null, retry_schedule = null, scope = null }) {
    super(message);
    this.status = status;
    this.code = code;
    this.scope = scope; // which limit a rate_limited refusal is ("answers_at_once": wait for one to finish)
    this.retryAfter = retryAfter ?? retry_after;
    // A busy refusal's waits before each retry, decided by the server for this person's plan.
    this.retrySchedule = Array.isArray(retry_schedule) ? retry_schedule : null;
  }
}

// Django rotates the CSRF secret at sign-in, so read the cookie on every request; the token
// rendered into the page is only a fallback for browsers that hide cookies from scripts.
function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  if (match) return decodeURIComponent(match[1]);
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

// A send answered as a stream: its first event is the turn; the rest (the answer's frames) are left
// on `sent` for attachStream, with `abort` to let go of the connection.
async function streamedTurn(response, controller) {
  const events = readEvents(response.body);
  let turn = null;
  try {
    const first = await events.next();
    if (!first.done && first.value.event === "turn") turn = JSON.parse(first.value.data);
  } catch { /* dropped before the turn arrived, or it was not readable */ }
  if (!turn) {
    controller.abort();
    throw new ApiError({
      status: 0, code: "network",
      message: gettext("The connection dropped while sending. Reload the conversation to see whether your message arrived."),
    });
  }
  return { ...turn, sent: { events, abort: () => controller.abort() } };
}

export function createApi(base) {
  // `body`: a value sent as JSON, or FormData sent as it is (multipart: a file upload).
  // `stream`: the answer may come back as the response itself (a send): see streamedTurn.
  async function request(method, path, body, { stream = false } = {}) {
    const form = body instanceof FormData;
    const headers = { Accept: stream ? "text/event-stream, application/json" : "application/json" };
    if (body !== undefined && !form) headers["Content-Type"] = "application/json";
    if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
    const controller = stream ? new AbortController() : null;
    let response;
    try {
      response = await fetch(base + path, {
        method, headers, credentials: "same-origin", signal: controller?.signal,
        body: body === undefined || form ? body : JSON.stringify(body),
      });
    } catch {
      throw new ApiError({ status: 0, code: "network", message: gettext("Can't reach the server. Check your connection and try again.") });
    }
    if (response.ok && (response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      return streamedTurn(response, controller);
    }
    if (response.status === 204) return null;
    let data = null;
    try { data = await response.json(); } catch { /* an HTML error page from a proxy, say */ }
    if (response.ok) return data;
    const error = (data && data.error) || {};
    const header = Number(response.headers.get("Retry-After"));
    throw new ApiError({
      status: response.status,
      code: error.code || (response.status === 503 ? "busy" : "error"),
      message: error.message
        || interpolate(gettext("The server answered %(status)s. Try again in a moment."), { status: response.status }, true),
      retryAfter: error.retry_after ?? (Number.isFinite(header) && header > 0 ? header : null),
      retry_schedule: error.retry_schedule,
      scope: error.scope,
    });
  }

  return {
    conversations: (q = "", { archived = false } = {}) => {
      const query = new URLSearchParams();
      if (q) query.set("q", q);
      if (archived) query.set("archived", "1");
      const tail = query.toString();
      return request("GET", `conversations${tail ? `?${tail}` : ""}`);
    },
    conversation: (id, leaf, before = null, { limit = null } = {}) => {
      const query = new URLSearchParams();
      if (leaf) query.set("leaf", leaf);
      if (before) query.set("before", before);
      if (limit) query.set("limit", limit);
      const tail = query.toString();
      return request("GET", `conversations/${id}${tail ? `?${tail}` : ""}`);
    },
    updateConversation: (id, fields) => request("PATCH", `conversations/${id}`, fields),
    deleteConversation: (id) => request("DELETE", `conversations/${id}`),
    send: (payload) => request("POST", "send", payload, { stream: true }),
    // `model`: another model than the conversation's (under an Auto answer, the larger one).
    regenerate: (messageId, model) => request("POST", `messages/${messageId}/regenerate`, model ? { model } : undefined, { stream: true }),
    continueAnswer: (messageId) => request("POST", `messages/${messageId}/continue`, undefined, { stream: true }),
    edit: (messageId, content) => request("POST", `messages/${messageId}/edit`, { content }, { stream: true }),
    stop: (messageId) => request("POST", `messages/${messageId}/stop`),
    rate: (messageId, feedback) => request("PUT", `messages/${messageId}/feedback`, feedback),
    withdrawFeedback: (messageId) => request("DELETE", `messages/${messageId}/feedback`),
    report: (messageId, reason) => request("POST", `messages/${messageId}/report`, { reason }),
    exportUrl: (id, format) => `${base}conversations/${id}/export?format=${format}`,
    share: (id) => request("GET", `conversations/${id}/share`),
    saveShare: (id, options) => request("POST", `conversations/${id}/share`, options),
    revokeShare: (id) => request("DELETE", `conversations/${id}/share`),
    passage: (chunkId) => request("GET", `passages/${chunkId}`),
    files: (ids) => request("GET", `files?ids=${ids.join(",")}`),
    uploadFile: (form) => request("POST", "files", form),
    cancelFile: (id) => request("POST", `files/${id}/cancel`),
    deleteFile: (id) => request("DELETE", `files/${id}`),
    collections: () => request("GET", "collections"),
  };
}

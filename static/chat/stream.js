// One answer's tokens over Server-Sent Events. The send's own response carries them first (read here
// with fetch); when that connection drops, EventSource takes over on the answer's stream URL from
// the last event id, and resumes by itself with Last-Event-ID after any later drop. So the text is
// simply the concatenation of every delta received. It must be closed after `done`, or it would
// reconnect and replay the finished answer.

/** The events of a `text/event-stream` body, as {id, event, data}; comments (keepalives) skipped. */
export async function* readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let carriage = ""; // a CR ending one chunk may be the first half of a CRLF
  try {
    for (;;) {
      const { value, done } = await reader.read();
      let text = carriage + (done ? "" : value);
      carriage = !done && text.endsWith("\r") ? "\r" : "";
      if (carriage) text = text.slice(0, -1);
      buffer += text.replace(/\r\n?/g, "\n"); // lines may end in CRLF, LF or CR
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let id = null;
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (!line || line.startsWith(":")) continue;
          const at = line.indexOf(":");
          const field = at < 0 ? line : line.slice(0, at);
          let text = at < 0 ? "" : line.slice(at + 1);
          if (text.startsWith(" ")) text = text.slice(1);
          if (field === "id") id = text;
          else if (field === "event") event = text;
          else if (field === "data") data.push(text);
        }
        if (data.length) yield { id, event, data: data.join("\n") };
      }
      if (done) return; // an event not ended by a blank line is dropped, as EventSource does
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function withAfter(url, after) {
  return after ? `${url}${url.includes("?") ? "&" : "?"}after=${encodeURIComponent(after)}` : url;
}

// `sent`: the send's own response, already past its `turn` event ({events, abort}), when there is one.
export function attachStream(url, { onDelta, onDone, onError, onLost, onBusy }, sent = null) {
  let finished = false;
  let source = null;
  let lastId = null;

  const end = () => {
    finished = true;
    source?.close();
    sent?.abort();
  };

  function handle(kind, raw) {
    let data = null;
    try { data = JSON.parse(raw); } catch { /* a malformed frame is skipped (or, for done, lost) */ }
    if (kind === "delta") {
      if (data) onDelta(data.text || "");
    } else if (kind === "busy") {
      // The engines were busy before the first token: the server waits and tries again by itself.
      if (data) onBusy?.(data);
    } else if (kind === "done") {
      end();
      if (data && data.message) onDone(data.message); else onLost();
    } else if (kind === "error") {
      end();
      onError(data || {});
    }
  }

  function follow(after) {
    source = new EventSource(withAfter(url, after), { withCredentials: true });
    for (const kind of ["delta", "busy", "done"]) source.addEventListener(kind, (event) => handle(kind, event.data));
    // A server `event: error` is a MessageEvent with data; a transport failure is a bare Event.
    source.addEventListener("error", (event) => {
      if (finished) return;
      if (event instanceof MessageEvent && event.data) {
        handle("error", event.data);
      } else if (source.readyState === EventSource.CLOSED) {
        // Not a stream answer at all (404, signed out...): the caller asks the JSON API instead.
        end();
        onLost();
      } // else CONNECTING: the browser retries with Last-Event-ID on its own.
    });
  }

  if (sent) {
    (async () => {
      try {
        for await (const { id, event, data } of sent.events) {
          if (finished) return;
          if (id) lastId = id;
          handle(event, data);
        }
      } catch { /* the connection dropped (or was closed): resumed below unless finished */ }
      if (!finished) follow(lastId);
    })();
  } else {
    follow(null);
  }

  return { close: end };
}

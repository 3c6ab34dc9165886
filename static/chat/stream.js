// One answer's tokens over Server-Sent Events. EventSource resumes by itself with Last-Event-ID
// after a dropped connection, so the text is simply the concatenation of every delta received.
// It must be closed after `done`, or it would reconnect and replay the finished answer.

export function attachStream(url, { onDelta, onDone, onError, onLost, onBusy }) {
  const source = new EventSource(url, { withCredentials: true });
  let finished = false;

  const end = () => { finished = true; source.close(); };

  source.addEventListener("delta", (event) => {
    try { onDelta(JSON.parse(event.data).text || ""); } catch { /* a malformed frame is skipped */ }
  });
  // The engines were busy before the first token: the server waits and tries again by itself.
  source.addEventListener("busy", (event) => {
    try { onBusy?.(JSON.parse(event.data)); } catch { /* a malformed frame is skipped */ }
  });
  source.addEventListener("done", (event) => {
    end();
    let message = null;
    try { message = JSON.parse(event.data).message; } catch { /* handled by onLost below */ }
    if (message) onDone(message); else onLost();
  });
  // A server `event: error` is a MessageEvent with data; a transport failure is a bare Event.
  source.addEventListener("error", (event) => {
    if (finished) return;
    if (event instanceof MessageEvent && event.data) {
      end();
      let error = {};
      try { error = JSON.parse(event.data); } catch { /* keep the generic message */ }
      onError(error);
    } else if (source.readyState === EventSource.CLOSED) {
      // Not a stream answer at all (404, signed out...): the caller asks the JSON API instead.
      end();
      onLost();
    } // else CONNECTING: the browser retries with Last-Event-ID on its own.
  });

  return { close: end };
}

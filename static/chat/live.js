// The WebSocket, used here for what no single request can tell: which of the user's conversations
// are generating right now, in any tab (`hello` on connect, then `generating` frames), and which
// changed (`conversation` frames: a title written after an answer, however late; a rename or a pin
// in another tab). It
// reconnects with backoff; a close for "not signed in" (4401) or "account suspended" (4403) is
// final, and the `error` frame sent before the latter, with the reason, goes to `onRefused`.

export function connectLive(path, { onGenerating, onSnapshot, onConversation, onRefused }) {
  let socket = null;
  let delay = 1000;
  let closedForGood = false;

  function open() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(`${scheme}//${location.host}${path}`);
    socket.addEventListener("open", () => { delay = 1000; });
    socket.addEventListener("message", (event) => {
      let frame;
      try { frame = JSON.parse(event.data); } catch { return; }
      if (frame.type === "hello") onSnapshot(frame.generating || []);
      else if (frame.type === "generating") onGenerating(frame);
      else if (frame.type === "conversation" && frame.conversation) onConversation?.(frame.conversation);
      else if (frame.type === "error" && String(frame.code).startsWith("account_")) onRefused?.(frame);
    });
    socket.addEventListener("close", (event) => {
      if (closedForGood || event.code === 4401 || event.code === 4403) return;
      setTimeout(open, delay);
      delay = Math.min(delay * 2, 30000);
    });
  }

  open();
  return { close() { closedForGood = true; socket?.close(); } };
}

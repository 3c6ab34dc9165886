"""A small client for the chat product over real sockets: JSON, SSE and WebSocket, as a browser would."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from tests.support.servers import LiveServer
from tests.support.sessions import browser_cookies, cookie_header, csrf_headers
from tests.support.waiting import wait_until  # noqa: F401  (re-exported for the chat tests)


@dataclass
class SSEEvent:
    id: str | None
    kind: str
    data: dict


def read_events(resp: httpx.Response, limit: int | None = None) -> Iterator[SSEEvent]:
    """The SSE events of a streamed response, to `done` or `limit` events."""
    assert resp.headers["content-type"].startswith("text/event-stream")
    seen = 0
    event: dict = {}
    for line in resp.iter_lines():
        if line.startswith(":"):
            continue
        if line == "":
            if event:
                yield SSEEvent(event.get("id"), event.get("event", "message"), json.loads(event["data"]))
                seen += 1
                if event.get("event") == "done" or (limit is not None and seen >= limit):
                    return
            event = {}
            continue
        field, _, value = line.partition(": ")
        event[field] = value


class ChatClient:
    def __init__(self, server: LiveServer, user=None, *, cookies: dict[str, str] | None = None):
        """Signed in as `user` with a new session, or with the `cookies` of another client: the same
        browser reaching the product at another address (another process, another proxy port)."""
        self.server = server
        self.cookies = dict(cookies) if cookies else browser_cookies(user)
        self.http = httpx.Client(
            base_url=server.base_url,
            cookies=self.cookies,
            headers=csrf_headers(server),
            timeout=30,
        )

    def close(self) -> None:
        self.http.close()

    def send(self, content: str, **fields) -> httpx.Response:
        return self.http.post("/chat/api/send", json={"content": content, **fields})

    def send_ok(self, content: str, **fields) -> dict:
        response = self.send(content, **fields)
        assert response.status_code == 201, response.text
        return response.json()

    def events(
        self,
        message_id: int,
        *,
        last_event_id: str | None = None,
        limit: int | None = None,
        response_headers: dict | None = None,
    ) -> Iterator[SSEEvent]:
        """SSE events of one answer; stops after `done`, or after `limit` events (a client leaving).
        The stream's response headers are copied into `response_headers` when given."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        with self.http.stream("GET", f"/chat/api/messages/{message_id}/stream", headers=headers, timeout=60) as resp:
            if response_headers is not None:
                response_headers.update(resp.headers)
            assert resp.status_code == 200, resp.read()
            yield from read_events(resp, limit)

    def send_streaming(
        self, content: str, *, limit: int | None = None, response_headers: dict | None = None, **fields
    ) -> list[SSEEvent]:
        """Send as the chat page does: the send's own response is the answer's stream (its first event
        the turn). Read to `done`, or `limit` events (a client leaving)."""
        accept = {"Accept": "text/event-stream, application/json"}
        body = {"content": content, **fields}
        with self.http.stream("POST", "/chat/api/send", json=body, headers=accept, timeout=60) as resp:
            if response_headers is not None:
                response_headers.update(resp.headers)
            assert resp.status_code == 201, resp.read()
            return list(read_events(resp, limit))

    def answer(self, message_id: int, **kwargs) -> tuple[str, dict, list[SSEEvent]]:
        """The whole answer read over SSE: (text, final message, events)."""
        events = list(self.events(message_id, **kwargs))
        assert events and events[-1].kind == "done", events
        text = "".join(e.data["text"] for e in events if e.kind == "delta")
        return text, events[-1].data["message"], events

    def message(self, conversation_id: int, message_id: int) -> dict:
        messages = self.http.get(f"/chat/api/conversations/{conversation_id}").json()["messages"]
        return next(m for m in messages if m["id"] == message_id)

    def ws_headers(self) -> dict:
        return {"Cookie": cookie_header(self.cookies), "Origin": self.server.base_url}


async def attach_and_read(ws, message_id: int, *, frame_timeout: float = 60) -> tuple[list[dict], dict]:
    """Attach an open chat WebSocket (its hello already read) to an answer and read the answer to its
    end: (the delta frames, the done frame)."""
    await ws.send(json.dumps({"type": "attach", "message_id": message_id}))
    deltas = []
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), frame_timeout))
        if frame["type"] == "delta":
            deltas.append(frame)
        elif frame["type"] == "done":
            return deltas, frame


def engine_running(engine_url: str) -> int:
    """Requests running or queued on the simulated engine, from SGLang's /get_load."""
    load = httpx.get(f"{engine_url}/get_load", timeout=5).json()
    entries = load if isinstance(load, list) else [load]
    return sum(int(e.get("num_reqs", 0)) for e in entries)  # num_reqs counts running plus waiting

"""The ASGI application's own routes (SSE beside Django, the WebSocket), tried as each actor on the
live Daphne server: what each actor gets, in the matrix's words."""

from __future__ import annotations

import asyncio
import json

import httpx
import websockets

from tests.security.authz_world import ACTORS, World
from tests.support.sessions import cookie_header, session_cookie_for

#: A WebSocket the server accepted and then closed with this code, before any command.
CLOSED_4401 = "closed 4401"
#: The deadline for one frame: a bound on a broken server, not a timing assertion.
FRAME_DEADLINE = 20


def cookies_for(world: World, actor: str) -> dict[str, str]:
    return {} if actor == "anonymous" else session_cookie_for(world.users[actor])


def ws_headers(server, cookies: dict[str, str], origin: str | None = None) -> dict[str, str]:
    headers = {"Origin": origin or server.base_url}
    if cookies:
        headers["Cookie"] = cookie_header(cookies)
    return headers


def sse_outcome(server, world: World, actor: str, message_id: int) -> int:
    """The status of an answer's SSE stream; a 200 is read to its `done` event, so it was served whole."""
    with (
        httpx.Client(base_url=server.base_url, cookies=cookies_for(world, actor), timeout=FRAME_DEADLINE) as http,
        http.stream("GET", f"/chat/api/messages/{message_id}/stream") as response,
    ):
        if response.status_code == 200:
            assert any(line == "event: done" for line in response.iter_lines()), "the stream never ended"
        else:
            body = json.loads(response.read())
            assert body["error"]["message"], body  # every refusal says why
        return response.status_code


async def _command(server, cookies: dict[str, str], frame: dict | None) -> int | str:
    """Connect; send `frame` (if any) and return the status of the server's answer to it: the
    error frame's status, or 200 for an accepted/stopping/done frame. Without a frame: "hello"."""
    async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=ws_headers(server, cookies)) as ws:
        try:
            first = json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))
        except websockets.ConnectionClosed:
            return f"closed {ws.close_code}"
        assert first["type"] == "hello", first
        if frame is None:
            return "hello"
        await ws.send(json.dumps({**frame, "ref": "r1"}))
        while True:
            reply = json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))
            if reply["type"] == "error":
                assert reply["message"], reply
                return reply["status"]
            if reply["type"] in ("accepted", "stopping", "done"):
                return 200


def ws_outcome(server, world: World, actor: str, frame: dict | None) -> int | str:
    return asyncio.run(_command(server, cookies_for(world, actor), frame))


def ws_commands(world: World) -> dict[str, dict]:
    """One frame per command of the chat WebSocket, naming the owner's objects (as the HTTP matrix
    does: a request that passes the ownership check is refused by the action's own rule, 400)."""
    return {
        "send": {
            "type": "send",
            "content": "Hello",
            "conversation_id": world.conversation.pk,
            "model": "no-such-model",
        },
        "regenerate": {"type": "regenerate", "message_id": world.question.pk},
        # The owner's answer ended by itself: only one cut at its length limit can be continued (400).
        "continue": {"type": "continue", "message_id": world.answer.pk},
        "attach": {"type": "attach", "message_id": world.answer.pk},
        "stop": {"type": "stop", "message_id": world.answer.pk},
        "detach": None,  # answers nothing, to anyone: nothing to compare (it only stops this socket's reader)
    }


__all__ = ["ACTORS", "CLOSED_4401", "sse_outcome", "ws_commands", "ws_headers", "ws_outcome"]

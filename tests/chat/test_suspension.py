"""A suspended user is told why, in the same sentence, on every transport: the chat's JSON endpoints,
SSE, the WebSocket and the OpenAI-compatible API. They stay signed in, so they can read it."""

import asyncio
import json

import httpx
import openai
import pytest
import websockets

from accounts.api_keys import create_api_key
from accounts.services import suspend_user
from chat.models import Message
from tests.support.plans import put_on_plan

REASON = "Sending spam to other users"


def _is_the_suspension_sentence(error: dict) -> str:
    """The refusal is a 403 `account_suspended` whose sentence says what happened and gives the reason."""
    assert error["code"] == "account_suspended", error
    assert error["status"] == 403
    assert "suspended" in error["message"] and REASON in error["message"]
    assert "try again" not in error["message"].lower()
    return error["message"]


async def _over_websocket(server, headers: dict, frames: list[dict]) -> tuple[list[dict], int | None]:
    """Send `frames` once connected; every frame received until the server closes, and its close code."""
    received = []
    async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=headers) as ws:
        for frame in frames:
            await ws.send(json.dumps(frame))
        try:
            while True:
                received.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
        except websockets.ConnectionClosed:
            pass
        return received, ws.close_code


def test_the_chat_endpoints_and_sse_refuse_a_suspended_user_with_the_reason_and_keep_them_signed_in(chat, user):
    put_on_plan(user, "free")
    before = chat.send_ok("hello")
    chat.answer(before["assistant_message"]["id"])

    suspend_user(user, REASON)

    refused = chat.send("are you there?")
    assert refused.status_code == 403
    assert refused.headers["content-type"].startswith("application/json")
    sentence = _is_the_suspension_sentence(refused.json()["error"])
    assert Message.objects.count() == 2  # nothing of the refused message was saved

    # SSE: the stream of an answer written before the suspension is refused the same way.
    stream = chat.http.get(f"/chat/api/messages/{before['assistant_message']['id']}/stream")
    assert stream.status_code == 403
    assert _is_the_suspension_sentence(stream.json()["error"]) == sentence

    # The next action says the same thing, not "Sign in to continue": the session was not ended.
    listing = chat.http.get("/chat/api/conversations")
    assert listing.status_code == 403
    assert _is_the_suspension_sentence(listing.json()["error"]) == sentence


def test_an_open_websocket_is_told_why_and_closed_the_moment_staff_suspend(chat, server, user):
    put_on_plan(user, "free")

    async def suspended_while_connected():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            assert json.loads(await ws.recv())["type"] == "hello"
            await asyncio.to_thread(suspend_user, user, REASON)
            # Nothing is sent: the suspension itself reaches the open socket.
            frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            return frame, ws.close_code

    frame, code = asyncio.run(suspended_while_connected())
    assert frame["type"] == "error"
    sentence = _is_the_suspension_sentence(frame)
    assert code == 4403
    assert not Message.objects.exists()

    # Connecting again: the error frame first, then the close.
    frames, code = asyncio.run(_over_websocket(server, chat.ws_headers(), []))
    assert [f["type"] for f in frames] == ["error"]
    assert _is_the_suspension_sentence(frames[0]) == sentence
    assert code == 4403

    # The same sentence as over HTTP.
    assert chat.send("hello").json()["error"]["message"] == sentence


def test_the_api_answers_a_suspended_users_key_with_an_openai_permission_error_carrying_the_reason(
    transactional_db, server, user
):
    put_on_plan(user, "pro")
    _, raw = create_api_key(user, "ci")
    suspend_user(user, REASON)

    response = httpx.post(
        server.base_url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {raw}"},
        json={"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert response.status_code == 403
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "permission_error" and error["code"] == "account_suspended"
    assert REASON in error["message"]

    with (
        openai.OpenAI(base_url=server.base_url + "/v1", api_key=raw, max_retries=0, timeout=30) as client,
        pytest.raises(openai.PermissionDeniedError) as refused,
    ):
        client.models.list()
    assert refused.value.status_code == 403
    assert refused.value.body["message"] == error["message"]

    # The web chat's sentence is the API's.
    chat_error = httpx.post(
        server.base_url + "/chat/api/send", json={"content": "hi"}, **_session_of(user, server)
    ).json()["error"]
    assert chat_error["message"] == error["message"]


def _session_of(user, server) -> dict:
    from tests.support.sessions import browser_cookies, csrf_headers

    return {
        "cookies": browser_cookies(user),
        "headers": csrf_headers(server),
        "timeout": 30,
    }

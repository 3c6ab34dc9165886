"""When things break mid-answer: the engine dies, the server process dies; and what another user
can reach (nothing, on every transport)."""

import asyncio
import json

import pytest
import websockets
from asgiref.sync import async_to_sync
from websockets.exceptions import ConnectionClosed

from billing.models import UsageRecord
from chat.generation.reap import INTERRUPTED_ERROR, reap_stalled
from chat.models import Message
from harness.engines import start_simulator
from tests.chat.live import ChatClient, wait_until
from tests.chat.test_live_streaming import LONG
from tests.support.live_fixtures import ENGINE_ARGS, HEARTBEAT_TTL
from tests.support.servers import start_daphne


@pytest.fixture
def private_stack(transactional_db):
    """An engine and a server of this test's own, so it can kill either."""
    engine = start_simulator(*ENGINE_ARGS)
    server = start_daphne(engine_url=engine.url, extra_env={"CHAT_HEARTBEAT_TTL_SECONDS": HEARTBEAT_TTL})
    yield engine, server
    server.stop()
    engine.stop()


def test_an_engine_that_dies_mid_answer_leaves_the_message_failed_with_its_partial_text(private_stack, user):
    engine, server = private_stack
    chat = ChatClient(server, user)
    assistant = chat.send_ok(LONG)["assistant_message"]
    seen = list(chat.events(assistant["id"], limit=3))

    engine.kill()

    text, final, _ = chat.answer(assistant["id"], last_event_id=seen[-1].id)
    assert final["status"] == "failed"
    assert final["error"]  # a sentence for the user, not a traceback
    assert "Traceback" not in final["error"]
    saved = Message.objects.get(pk=assistant["id"])
    assert saved.content == "".join(e.data["text"] for e in seen) + text
    assert saved.content
    # The user's question is kept whatever happened to the answer.
    assert Message.objects.get(pk=assistant["parent_id"]).content == LONG
    chat.close()


def test_a_runner_that_dies_is_found_by_the_reaper_and_marked_interrupted(private_stack, user):
    _engine, server = private_stack
    chat = ChatClient(server, user)
    assistant = chat.send_ok(LONG)["assistant_message"]
    seen = list(chat.events(assistant["id"], limit=3))

    server.kill()  # the process dies: no cleanup, no final write, the heartbeat stops

    assert Message.objects.get(pk=assistant["id"]).status == "streaming"
    reaped = wait_until(
        lambda: async_to_sync(reap_stalled)(grace_seconds=0),
        timeout=30,
        what="the heartbeat to expire and the reaper to act",
    )
    assert reaped == [assistant["id"]]
    saved = Message.objects.get(pk=assistant["id"])
    assert saved.status == "interrupted"
    assert saved.error == INTERRUPTED_ERROR
    assert saved.content.startswith("".join(e.data["text"] for e in seen))
    assert UsageRecord.objects.filter(generation_id=saved.pk).count() == 1
    # Running it again changes nothing: nothing stays pending or streaming, nothing is billed twice.
    assert async_to_sync(reap_stalled)(grace_seconds=0) == []
    assert UsageRecord.objects.filter(generation_id=saved.pk).count() == 1
    chat.close()


def test_another_users_conversation_message_and_stream_are_404_on_every_transport(chat, other_chat, server):
    turn = chat.send_ok("Secret plans")
    chat.answer(turn["assistant_message"]["id"])
    conversation_id = turn["conversation"]["id"]
    message_id = turn["assistant_message"]["id"]

    http = other_chat.http
    assert http.get(f"/chat/api/conversations/{conversation_id}").status_code == 404
    assert http.patch(f"/chat/api/conversations/{conversation_id}", json={"title": "mine"}).status_code == 404
    assert http.delete(f"/chat/api/conversations/{conversation_id}").status_code == 404
    assert http.get(f"/chat/api/conversations/{conversation_id}/export").status_code == 404
    assert http.get(f"/chat/api/messages/{message_id}/stream").status_code == 404
    assert http.post(f"/chat/api/messages/{message_id}/stop").status_code == 404
    assert http.post(f"/chat/api/messages/{message_id}/regenerate").status_code == 404
    assert http.post("/chat/api/send", json={"content": "hi", "conversation_id": conversation_id}).status_code == 404
    assert http.get(f"/c/{conversation_id}/").status_code == 404
    assert conversation_id not in [c["id"] for c in http.get("/chat/api/conversations").json()["conversations"]]

    async def over_websocket():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=other_chat.ws_headers()) as ws:
            await ws.recv()  # hello
            answers = []
            for frame in (
                {"type": "attach", "message_id": message_id},
                {"type": "stop", "ref": "s", "message_id": message_id},
                {"type": "send", "ref": "x", "content": "hi", "conversation_id": conversation_id},
            ):
                await ws.send(json.dumps(frame))
                answers.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            return answers

    for answer in asyncio.run(over_websocket()):
        assert answer["type"] == "error" and answer["status"] == 404
    assert Message.objects.filter(conversation_id=conversation_id).count() == 2  # nothing added


def test_anonymous_clients_are_refused_on_every_transport(server, transactional_db):
    import httpx

    assert httpx.get(f"{server.base_url}/chat/api/conversations").status_code == 401
    assert httpx.get(f"{server.base_url}/chat/api/messages/1/stream").status_code == 401

    async def connect():
        async with websockets.connect(
            server.ws_url + "/ws/chat/", additional_headers={"Origin": server.base_url}
        ) as ws:
            await ws.recv()

    with pytest.raises(ConnectionClosed) as closed:
        asyncio.run(connect())
    assert closed.value.rcvd.code == 4401

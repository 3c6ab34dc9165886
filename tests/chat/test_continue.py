"""Continue: an answer cut at its length limit is written on from where it stopped.

Over a real Daphne and the simulated worker in echo mode (its answer is the question, so "whole" can be
checked to the character): the plan's answers are 12 tokens long, the question three times that. The
cut answer says so (`finish_reason`, `can_continue`); each continuation is a new version beside the cut
one, beginning with its text, and is billed for what it wrote, not for the text it began with.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from billing.models import UsageRecord
from chat.models import Conversation, Message
from tests.chat.conftest import _settle_down
from tests.chat.live import ChatClient, read_events
from tests.support.plans import put_on_plan

QUESTION = (
    "The keeper climbs the stairs at dusk, trims the wick of the great lamp, and watches the ships "
    "pass safely along the rocky coast through the long night, until the morning comes."
)
ANSWER_TOKENS = 12


@pytest.fixture
def chat(transactional_db, echo_server, user):
    put_on_plan(user, "pro", max_output_tokens=ANSWER_TOKENS)
    client = ChatClient(echo_server, user)
    yield client
    _settle_down(client)
    client.close()


def _titled_chat(user) -> int:
    """A chat with its title already: no title is asked of the engine after the answer."""
    return Conversation.objects.create(owner=user, title="The lighthouse", model="sim-small").pk


def _continue(chat: ChatClient, message_id: int) -> tuple[dict, str, dict]:
    """Continue as the page does (the request's response is the answer's stream): (turn, text, final)."""
    accept = {"Accept": "text/event-stream, application/json"}
    with chat.http.stream("POST", f"/chat/api/messages/{message_id}/continue", headers=accept, timeout=60) as resp:
        assert resp.status_code == 201, resp.read()
        events = list(read_events(resp))
    assert events[0].kind == "turn" and events[-1].kind == "done"
    text = "".join(e.data["text"] for e in events if e.kind == "delta")
    return events[0].data, text, events[-1].data["message"]


def test_a_cut_answer_is_continued_version_by_version_to_its_end(chat, user):
    turn = chat.send_ok(QUESTION, conversation_id=_titled_chat(user))
    text, cut, _ = chat.answer(turn["assistant_message"]["id"])
    assert cut["status"] == "completed" and cut["finish_reason"] == "length" and cut["can_continue"]
    assert QUESTION.startswith(text) and text != QUESTION

    versions = [cut]
    while versions[-1]["can_continue"]:
        assert len(versions) < 8, "the question is about three answers long"
        before = versions[-1]
        started, streamed, final = _continue(chat, before["id"])
        new = started["assistant_message"]
        # A new version beside the cut one, starting from its text, shown at once and on its stream.
        assert new["parent_id"] == before["parent_id"] and new["content"] == before["content"]
        assert new["siblings"][-2:] == [before["id"], new["id"]]
        assert streamed == final["content"] and final["content"].startswith(before["content"])
        assert len(final["content"]) > len(before["content"])
        # Billed for what it wrote: at most one answer's tokens, though its text is longer.
        row = UsageRecord.objects.get(generation_id=str(final["id"]))
        assert row.completion_tokens == final["completion_tokens"] <= ANSWER_TOKENS
        assert final["prompt_tokens"] > before["prompt_tokens"]  # the cut answer is in the prompt...
        assert final["cached_tokens"] >= before["prompt_tokens"]  # ...from the engine's prefix cache
        versions.append(final)

    last = versions[-1]
    assert len(versions) >= 3 and last["status"] == "completed" and last["finish_reason"] == "stop"
    assert last["content"] == QUESTION and not last["can_continue"]
    # After a reload the chat shows the whole answer, as the newest of its versions.
    shown = chat.http.get(f"/chat/api/conversations/{turn['conversation']['id']}").json()["messages"]
    assert [m["id"] for m in shown] == [turn["user_message"]["id"], last["id"]]
    assert shown[1]["content"] == QUESTION and shown[1]["siblings"] == [v["id"] for v in versions]


def test_the_websocket_continues_an_answer_as_the_page_does(chat, echo_server, user):
    turn = chat.send_ok(QUESTION, conversation_id=_titled_chat(user))
    _, cut, _ = chat.answer(turn["assistant_message"]["id"])

    async def continued() -> tuple[dict, str, dict]:
        async with websockets.connect(echo_server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            await ws.send(json.dumps({"type": "continue", "ref": "c1", "message_id": cut["id"]}))
            accepted, text = None, ""
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
                assert frame["type"] != "error", frame
                if frame["type"] == "accepted":
                    accepted = frame
                elif frame["type"] == "delta":
                    text += frame["text"]
                elif frame["type"] == "done":
                    return accepted, text, frame["message"]

    accepted, text, final = asyncio.run(continued())
    assert accepted["ref"] == "c1" and accepted["assistant_message"]["content"] == cut["content"]
    assert text == final["content"] and final["content"].startswith(cut["content"])
    assert final["completion_tokens"] <= ANSWER_TOKENS < len(final["content"].split())


def test_only_an_answer_cut_at_its_length_limit_can_be_continued(chat, user):
    turn = chat.send_ok("Short and sweet.", conversation_id=_titled_chat(user))
    _, whole, _ = chat.answer(turn["assistant_message"]["id"])
    assert whole["finish_reason"] == "stop" and not whole["can_continue"]

    for message_id in (whole["id"], turn["user_message"]["id"]):
        refused = chat.http.post(f"/chat/api/messages/{message_id}/continue")
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["message"].endswith(".")
    assert Message.objects.count() == 2  # nothing was saved, and no engine was asked
    assert UsageRecord.objects.count() == 1

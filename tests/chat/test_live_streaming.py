"""The path of one message through a real Daphne server, a real simulated SGLang worker,
PostgreSQL and Redis: streamed over SSE and WebSocket, resumed, stopped, and left running."""

import asyncio
import json
import os

import httpx
import pytest
import websockets

from billing.models import UsageRecord
from chat.generation.streams.redis import _stream_key
from chat.models import Message
from config.redis import sync_client
from tests.chat.live import attach_and_read, engine_running, wait_until
from tests.support.plans import put_on_plan

LONG = "Write a long story about a lighthouse keeper. " * 3


def test_a_message_streamed_over_sse_arrives_whole_and_is_saved(chat):
    turn = chat.send_ok("Hello there, tell me about tides.")
    assistant = turn["assistant_message"]
    assert turn["user_message"]["content"] == "Hello there, tell me about tides."
    assert assistant["status"] in {"pending", "streaming"}

    text, final, events = chat.answer(assistant["id"])

    assert final["status"] == "completed"
    assert text and final["content"] == text
    assert len([e for e in events if e.kind == "delta"]) > 1  # it streamed, not one lump
    saved = Message.objects.get(pk=assistant["id"])
    assert saved.content == text and saved.completion_tokens > 0 and saved.ttft_ms is not None
    record = UsageRecord.objects.get(generation_id=saved.pk)
    assert (record.prompt_tokens, record.completion_tokens) == (saved.prompt_tokens, saved.completion_tokens)


def test_a_second_reader_attaching_mid_answer_and_a_reconnecting_reader_each_see_it_exactly_once(chat):
    assistant = chat.send_ok(LONG)["assistant_message"]

    # A first reader leaves after a few frames, remembering the last id it saw ...
    first_part = list(chat.events(assistant["id"], limit=3))
    assert [e.kind for e in first_part] == ["delta"] * 3
    # ... and reconnects with Last-Event-ID, as EventSource does.
    rest_text, final, rest = chat.answer(assistant["id"], last_event_id=first_part[-1].id)
    # A second reader attaches mid-answer from the start.
    whole_text, _, _ = chat.answer(assistant["id"])

    resumed = "".join(e.data["text"] for e in first_part) + rest_text
    assert resumed == whole_text == final["content"]
    assert not {e.id for e in first_part} & {e.id for e in rest}


def test_a_send_that_accepts_an_event_stream_is_itself_the_answer_stream(chat):
    """The chat page's send: one request carries the turn and then the whole answer."""
    headers: dict = {}
    events = chat.send_streaming("Hello there, tell me about tides.", response_headers=headers)

    assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    assert events[0].kind == "turn" and events[-1].kind == "done"
    turn = events[0].data
    assert turn["user_message"]["content"] == "Hello there, tell me about tides."
    deltas = [e for e in events if e.kind == "delta"]
    assert len(deltas) > 1 and all(e.id for e in deltas)
    text = "".join(e.data["text"] for e in deltas)
    final = events[-1].data["message"]
    assert final["id"] == turn["assistant_message"]["id"] and final["status"] == "completed"
    assert Message.objects.get(pk=final["id"]).content == text == final["content"]
    # The answer's own stream replays the same frames, with the same ids.
    replayed, _, replay = chat.answer(final["id"])
    assert replayed == text and [e.id for e in replay] == [e.id for e in events[1:]]


def test_a_send_stream_left_midway_resumes_from_its_last_event_on_the_answers_stream(chat):
    first_part = chat.send_streaming(LONG, limit=4)
    assert [e.kind for e in first_part] == ["turn", "delta", "delta", "delta"]
    answer_id = first_part[0].data["assistant_message"]["id"]

    rest_text, final, rest = chat.answer(answer_id, last_event_id=first_part[-1].id)

    assert "".join(e.data["text"] for e in first_part[1:]) + rest_text == final["content"]
    assert not {e.id for e in first_part} & {e.id for e in rest}
    assert final["status"] == "completed"  # leaving the send's stream did not stop the answer


def test_a_refused_streaming_send_is_the_json_error_and_saves_nothing(chat):
    before = Message.objects.count()
    response = chat.http.post(
        "/chat/api/send", json={"content": "   "}, headers={"Accept": "text/event-stream, application/json"}
    )
    assert response.status_code == 400 and response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["message"]
    assert Message.objects.count() == before


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_open_send_streams_hold_no_thread_each(chat, server, user):
    """A streamed send lasts as long as its answer; no thread may last with it (Django's request thread
    for its thread-sensitive calls included). More streams are opened than the loop's shared executor
    may have threads (min(32, CPUs + 4))."""
    streams = min(32, (os.cpu_count() or 1) + 4) + 10
    put_on_plan(user, "pro", answers_at_once=streams + 5, requests_per_minute=1000)
    # The engine echoes the prompt: an answer of some 500 tokens, streaming for many seconds.
    prompt = " ".join(f"Sentence {n} about lighthouses, tides and the keepers who watched them." for n in range(40))
    before = _threads(server.process.pid)

    async def open_streams() -> int:
        headers = {**chat.http.headers, "Accept": "text/event-stream, application/json"}
        async with httpx.AsyncClient(
            base_url=server.base_url, cookies=chat.cookies, headers=headers, timeout=60
        ) as http:
            opened = []
            for _ in range(streams):  # one after another, each to its first token: no burst to refuse
                response = await http.send(
                    http.build_request("POST", "/chat/api/send", json={"content": prompt}), stream=True
                )
                assert response.status_code == 201, await response.aread()
                async for line in response.aiter_lines():
                    if line.startswith("event: delta"):
                        break
                opened.append(response)
            during = _threads(server.process.pid)
            for response in opened:
                await response.aclose()
        return during

    during = asyncio.run(open_streams())
    for answer in Message.objects.filter(conversation__owner=user, role=Message.Role.ASSISTANT):
        chat.http.post(f"/chat/api/messages/{answer.pk}/stop")  # leaving did not stop them; this does

    assert during - before < streams, (before, during)


def test_a_message_streamed_over_websocket_arrives_whole(chat, server):
    async def scenario():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            hello = json.loads(await ws.recv())
            assert hello["type"] == "hello"
            await ws.send(json.dumps({"type": "send", "ref": "r1", "content": "Hi over a socket"}))
            frames = []
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
                frames.append(frame)
                if frame["type"] == "done":
                    return frames

    frames = asyncio.run(scenario())
    accepted = next(f for f in frames if f["type"] == "accepted")
    assert accepted["ref"] == "r1"
    text = "".join(f["text"] for f in frames if f["type"] == "delta")
    assert frames[-1]["message"]["status"] == "completed"
    assert (
        text == frames[-1]["message"]["content"] == Message.objects.get(pk=accepted["assistant_message"]["id"]).content
    )
    assert any(f["type"] == "generating" and f["active"] for f in frames)


def test_a_websocket_attaching_mid_answer_replays_then_follows(chat, server):
    assistant = chat.send_ok(LONG)["assistant_message"]
    list(chat.events(assistant["id"], limit=2))  # it is under way

    async def attach():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            return await attach_and_read(ws, assistant["id"])

    deltas, done = asyncio.run(attach())
    assert "".join(d["text"] for d in deltas) == done["message"]["content"]
    assert len({d["id"] for d in deltas}) == len(deltas)


def test_stop_reaches_the_engine_keeps_the_partial_answer_and_bills_only_what_was_produced(chat, engine):
    assistant = chat.send_ok(LONG)["assistant_message"]
    seen = list(chat.events(assistant["id"], limit=3))
    assert engine_running(engine.url) >= 1

    response = chat.http.post(f"/chat/api/messages/{assistant['id']}/stop")
    assert response.status_code in {200, 202}

    text, final, _ = chat.answer(assistant["id"], last_event_id=seen[-1].id)
    assert final["status"] == "stopped"
    wait_until(lambda: engine_running(engine.url) == 0, what="the engine to drop the aborted request")
    saved = Message.objects.get(pk=assistant["id"])
    assert saved.content == "".join(e.data["text"] for e in seen) + text
    assert 0 < saved.completion_tokens < 1024
    record = UsageRecord.objects.get(generation_id=saved.pk)
    assert record.completion_tokens == saved.completion_tokens


def test_closing_the_client_does_not_stop_the_answer(chat):
    assistant = chat.send_ok(LONG)["assistant_message"]
    list(chat.events(assistant["id"], limit=2))  # read a little, then go away

    wait_until(
        lambda: Message.objects.get(pk=assistant["id"]).status == "completed",
        timeout=60,
        what="the answer to finish with nobody watching",
    )
    # On "reload" the whole answer is there, from the stream or the database.
    text, final, _ = chat.answer(assistant["id"])
    assert final["status"] == "completed" and text == final["content"]


def test_follow_up_messages_continue_the_conversation(chat):
    first = chat.send_ok("My name is Ada.")
    chat.answer(first["assistant_message"]["id"])
    second = chat.send_ok("What is my name?", conversation_id=first["conversation"]["id"])
    chat.answer(second["assistant_message"]["id"])

    assert second["user_message"]["parent_id"] == first["assistant_message"]["id"]
    messages = chat.http.get(f"/chat/api/conversations/{first['conversation']['id']}").json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    # The second prompt carried the first turn, so the engine found its prefix cached.
    assert Message.objects.get(pk=second["assistant_message"]["id"]).cached_tokens > 0


def test_regenerate_and_edit_make_branches(chat):
    turn = chat.send_ok("Name a colour.")
    chat.answer(turn["assistant_message"]["id"])

    regen = chat.http.post(f"/chat/api/messages/{turn['assistant_message']['id']}/regenerate")
    assert regen.status_code == 201, regen.text
    chat.answer(regen.json()["assistant_message"]["id"])
    edit = chat.http.post(f"/chat/api/messages/{turn['user_message']['id']}/edit", json={"content": "Name a fruit."})
    assert edit.status_code == 201, edit.text
    chat.answer(edit.json()["assistant_message"]["id"])

    shown = chat.http.get(f"/chat/api/conversations/{turn['conversation']['id']}").json()["messages"]
    assert shown[0]["content"] == "Name a fruit."
    assert shown[0]["siblings"] == [turn["user_message"]["id"], edit.json()["user_message"]["id"]]
    older = chat.http.get(
        f"/chat/api/conversations/{turn['conversation']['id']}", params={"leaf": turn["user_message"]["id"]}
    ).json()["messages"]
    assert older[1]["siblings"] == [turn["assistant_message"]["id"], regen.json()["assistant_message"]["id"]]
    assert older[1]["id"] == regen.json()["assistant_message"]["id"]  # newest answer on that branch


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({"content": ""}, 400, "bad_request"),
        ({"content": "x" * 40000}, 413, "too_large"),
        ({"content": "hi", "model": "no-such-model"}, 400, "bad_request"),
        ({"content": "hi", "conversation_id": "seven"}, 400, "bad_request"),
    ],
)
def test_bad_input_gets_a_clear_error_and_saves_nothing(chat, body, status, code):
    response = chat.http.post("/chat/api/send", json=body)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code and response.json()["error"]["message"]
    assert not Message.objects.exists()


def test_malformed_json_is_a_400_not_a_crash(chat):
    response = chat.http.post("/chat/api/send", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]["message"]


def test_a_websocket_attaching_to_an_answer_whose_stream_has_expired_reads_the_saved_answer(chat, server):
    """The follower reads the saved answer from the database after the command that started it has
    ended: on its own context, not the command's thread (which asgiref refuses once the command is over)."""
    assistant = chat.send_ok("A short one")["assistant_message"]
    done = list(chat.events(assistant["id"]))[-1]
    assert done.kind == "done"
    sync_client().delete(_stream_key(assistant["id"]))  # its stream lapsed: only the saved answer is left

    async def attach():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            return await attach_and_read(ws, assistant["id"])

    deltas, ended = asyncio.run(attach())
    assert ended["message"]["status"] == "completed"
    assert "".join(d["text"] for d in deltas) == ended["message"]["content"] == done.data["message"]["content"]
    assert " 500 " not in server.log() and "RuntimeError" not in server.log()

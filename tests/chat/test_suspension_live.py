"""Suspension takes effect at once on what the user has running: the answer being written stops, its
SSE stream ends, an open WebSocket is told why and closed, and the API refuses their key."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest
import websockets

from accounts.api_keys import create_api_key
from accounts.services import suspend_user
from audit.models import AuditEntry
from chat.models import Message
from harness.engines import start_simulator
from moderation.models import Flag
from review.services import suspend_if_repeated
from tests.chat.live import ChatClient, wait_until
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.django_db(transaction=True)

REASON = "Scraping answers to resell them"


@pytest.fixture
def long_answers():
    """Answers of 2,000 tokens, 10 ms apart: still being written when staff act."""
    worker = start_simulator(
        "--accept-any-model", "--decode-step-time", "0.01", "--min-answer-tokens", "2000", "--max-answer-tokens", "2000"
    )
    server = start_daphne(engine_url=worker.url, extra_env={"CHAT_HEARTBEAT_TTL_SECONDS": "2"})
    yield server
    server.stop()
    worker.stop()


def test_a_running_answer_stops_its_stream_ends_the_socket_closes_and_the_api_refuses(long_answers, user):
    put_on_plan(user, "pro", max_output_tokens=4000)
    _, raw_key = create_api_key(user, "ci")
    chat = ChatClient(long_answers, user)
    sent = chat.send_ok("Write me the longest story you can.")
    message_id = sent["assistant_message"]["id"]
    wait_until(lambda: Message.objects.get(pk=message_id).status == "streaming", what="the answer to stream")

    events: list = []
    reader = threading.Thread(target=lambda: events.extend(chat.events(message_id)))
    reader.start()
    # "streaming" is set while the engine works on the first token: wait for words, so that there is
    # an answer to stop part-way (a suspension before the first token leaves none).
    wait_until(lambda: any(event.kind == "delta" for event in events), what="the answer's first words")

    async def suspended_while_connected():
        async with websockets.connect(long_answers.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            assert json.loads(await ws.recv())["type"] == "hello"
            await asyncio.to_thread(suspend_user, user, REASON)
            frames = []
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    frames.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            return frames, ws.close_code

    frames, code = asyncio.run(suspended_while_connected())
    assert code == 4403
    error = next(f for f in frames if f["type"] == "error")
    assert error["code"] == "account_suspended" and REASON in error["message"]

    # The answer stopped where it was (not written to its end), and the open SSE stream ended with it.
    answer = wait_until(
        lambda: (m := Message.objects.get(pk=message_id)).status == "stopped" and m, what="the running answer to stop"
    )
    assert 0 < answer.completion_tokens < 2000
    reader.join(timeout=30)
    assert not reader.is_alive() and events[-1].kind == "done"
    assert events[-1].data["message"]["status"] == "stopped"

    refused = httpx.post(
        f"{long_answers.base_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {raw_key}"},
        json={"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert refused.status_code == 403 and REASON in refused.json()["error"]["message"]
    chat.close()


def test_an_automatic_suspension_is_in_the_audit_log_as_the_systems_with_its_rule(transactional_db, user, settings):
    settings.MODERATION_SUSPEND_AFTER_UPHELD = 2
    flags = [
        Flag.objects.create(user=user, source=Flag.Source.INPUT, category="harassment", state=Flag.State.UPHELD)
        for _ in range(2)
    ]
    # A dismissed flag does not count toward the rule.
    Flag.objects.create(user=user, source=Flag.Source.OUTPUT, category="harassment", state=Flag.State.DISMISSED)
    assert suspend_if_repeated(user)
    entry = AuditEntry.objects.get(action="user.suspend", target_id=str(user.pk))
    assert entry.actor is None and "automatically" in entry.reason
    assert entry.details == {
        "rule": "MODERATION_SUSPEND_AFTER_UPHELD",
        "limit": 2,
        "upheld_flags": 2,
        "flags": [flag.pk for flag in flags],
    }


def test_a_running_api_completion_ends_with_the_refusal(long_answers, user):
    """A program streaming a long completion is told at once, in the stream, and the engine stops."""
    put_on_plan(user, "pro", max_output_tokens=4000)
    _, raw_key = create_api_key(user, "ci")
    chunks: list[str] = []
    started = threading.Event()

    def read_stream():
        with httpx.stream(
            "POST",
            f"{long_answers.base_url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {raw_key}"},
            json={"model": "sim-small", "stream": True, "messages": [{"role": "user", "content": "A long story."}]},
            timeout=60,
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    chunks.append(line[len("data: ") :])
                    if len(chunks) > 5:
                        started.set()

    reader = threading.Thread(target=read_stream)
    reader.start()
    assert started.wait(30), "the completion did not start streaming"
    suspend_user(user, REASON)
    reader.join(timeout=30)
    assert not reader.is_alive(), "the stream did not end"
    assert chunks[-1] == "[DONE]"
    error = json.loads(chunks[-2])["error"]
    assert error["code"] == "account_suspended" and REASON in error["message"]
    text = "".join(json.loads(c)["choices"][0]["delta"].get("content", "") for c in chunks[:-2] if '"choices"' in c)
    assert 0 < len(text.split()) < 2000  # it stopped part-way

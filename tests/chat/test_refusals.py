"""Every refusal on the chat transports: a status, a code, a sentence, and nothing half-saved."""

import asyncio
import json

import pytest
import websockets

from chat.models import Message
from config.refusals import Busy
from inference.admission import admit_request
from tests.support.plans import put_on_plan


def test_the_rate_limit_answers_429_with_retry_after_on_http_and_on_the_websocket(chat, server, user):
    put_on_plan(user, "free", requests_per_minute=2)
    # Limits count in fixed one-minute windows; a burst may straddle one edge (then 2 more pass).
    for _ in range(5):
        refused = chat.send("hello")
        if refused.status_code != 201:
            break
        chat.answer(refused.json()["assistant_message"]["id"])
    accepted = Message.objects.filter(role="user").count()
    assert refused.status_code == 429 and 2 <= accepted <= 4
    assert int(refused.headers["Retry-After"]) > 0
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and "Free" in error["message"]

    async def over_websocket():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            for _ in range(3):  # a new window may have begun since the HTTP refusal
                await ws.send(json.dumps({"type": "send", "ref": "r", "content": "and another"}))
                frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if frame["type"] == "error":
                    return frame
                while frame["type"] != "done":  # admitted: let the answer finish first
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
            return frame

    frame = asyncio.run(over_websocket())
    assert frame["type"] == "error" and frame["status"] == 429 and frame["ref"] == "r"
    assert frame["retry_after"] > 0
    # Refused messages were not half-saved: every user message has its answer.
    assert Message.objects.filter(role="user").count() == Message.objects.filter(role="assistant").count()


def test_a_model_outside_the_plan_is_403_and_names_the_plan_that_has_it(chat, user):
    put_on_plan(user, "free")
    refused = chat.send("hi", model="sim-large")
    assert refused.status_code == 403
    assert "sim-large" in refused.json()["error"]["message"]
    assert not Message.objects.exists()


def test_a_spent_quota_is_429_quota_exceeded(chat, user):
    put_on_plan(user, "free", tokens_per_month=10)
    refused = chat.send("hi")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert "Retry-After" in refused.headers


def test_at_busy_times_free_requests_are_shed_first(settings, db):
    settings.ADMISSION_SOFT_LIMIT, settings.ADMISSION_HARD_LIMIT = 0, 10
    with pytest.raises(Busy) as shed:
        admit_request("free")
    assert shed.value.status == 503 and shed.value.retry_after
    admit_request("premium")  # admitted until the hard limit

    settings.ADMISSION_HARD_LIMIT = 0
    with pytest.raises(Busy):
        admit_request("premium")

"""Every refusal on the chat transports: a status, a code, a sentence, and nothing half-saved."""

import asyncio
import json
import time
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import websockets

from billing.models import UsageRecord
from chat.models import Conversation, Message
from config import refusal_counts
from config.per_minute import minute_of
from tests.chat.live import ChatClient
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne
from tests.support.waiting import wait_until


def test_the_rate_limit_answers_429_with_retry_after_on_http_and_on_the_websocket(chat, server, user):
    put_on_plan(user, "free", requests_per_minute=2)
    started = time.monotonic()
    for _ in range(2):
        accepted = chat.send("hello")
        assert accepted.status_code == 201
        chat.answer(accepted.json()["assistant_message"]["id"])

    refused = chat.send("hello")
    # A moving window: the third request in any 60 seconds is refused, whenever the test starts, and
    # told to come back when the first one leaves the window.
    assert refused.status_code == 429
    assert 60 - (time.monotonic() - started) <= int(refused.headers["Retry-After"]) <= 60
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and "Free" in error["message"]
    assert error["retry_after"] == int(refused.headers["Retry-After"])
    assert Message.objects.filter(role="user").count() == 2

    async def over_websocket():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            await ws.send(json.dumps({"type": "send", "ref": "r", "content": "and another"}))
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    frame = asyncio.run(over_websocket())
    # The same window on every transport.
    assert frame["type"] == "error" and frame["status"] == 429 and frame["ref"] == "r"
    assert 60 - (time.monotonic() - started) <= frame["retry_after"] <= 60
    # Refused messages were not half-saved: every user message has its answer.
    assert Message.objects.filter(role="user").count() == 2
    assert Message.objects.filter(role="assistant").count() == 2


def test_a_new_chat_beyond_the_plans_number_a_day_is_refused_on_http_and_websocket_but_old_chats_go_on(
    chat, server, user
):
    put_on_plan(user, "free", new_chats_per_day=2)
    first = chat.send_ok("hello")
    chat.answer(first["assistant_message"]["id"])
    chat.answer(chat.send_ok("hello again")["assistant_message"]["id"])

    refused = chat.send("a third new chat")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "new_chat_limit"
    assert error["message"].startswith("You started 2 new chats in the last 24 hours, the most the Free plan allows.")
    assert int(refused.headers["Retry-After"]) == error["retry_after"]

    async def over_websocket():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            await ws.send(json.dumps({"type": "send", "ref": "new", "content": "and a fourth"}))
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    frame = asyncio.run(over_websocket())
    assert (frame["type"], frame["status"], frame["code"], frame["ref"]) == ("error", 429, "new_chat_limit", "new")

    # Writing in a chat already started is never refused by this rule.
    more = chat.send_ok("and a follow-up", conversation_id=first["conversation"]["id"])
    chat.answer(more["assistant_message"]["id"])
    assert Conversation.objects.filter(owner=user).count() == 2
    assert Message.objects.filter(role="user").count() == 3  # nothing refused was half-saved
    assert Message.objects.filter(role="assistant").count() == 3


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


def test_a_message_too_long_for_the_plans_window_is_413_on_http_and_websocket_and_nothing_is_billed(chat, server, user):
    put_on_plan(user, "free")
    message = "word " * 6_000  # 30,000 characters (under the 32,000 limit), about 7,500 tokens

    refused = chat.send(message)
    assert refused.status_code == 413
    error = refused.json()["error"]
    assert error["code"] == "too_large"
    assert "7,5" in error["message"] and "4,096" in error["message"]

    async def over_websocket():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            await ws.send(json.dumps({"type": "send", "ref": "long", "content": message}))
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    frame = asyncio.run(over_websocket())
    assert frame["type"] == "error" and frame["status"] == 413 and frame["ref"] == "long"
    assert frame["message"] == error["message"]
    assert not Message.objects.exists()
    assert not UsageRecord.objects.exists()


@pytest.fixture
def own_server(transactional_db, engine, settings):
    """A server counting into a Redis database of its own. The session's server writes an earlier test's
    refusals up to a second after that test ends (config.refusal_counts), into the minute this test
    counts in, whatever the test flushed before it began."""
    url = urlsplit(settings.REDIS_URL)
    own_redis = urlunsplit(url._replace(path=f"/{(int(url.path.strip('/') or 0) + 1) % 16}"))
    redis.Redis.from_url(own_redis).flushdb()
    server = start_daphne(engine_url=engine.url, extra_env={"REDIS_URL": own_redis})
    settings.REDIS_URL = own_redis  # the test reads the counts where its server writes them
    yield server
    server.stop()
    redis.Redis.from_url(own_redis).flushdb()


@pytest.fixture
def own_chat(own_server, user):
    client = ChatClient(own_server, user)
    yield client
    client.close()


def test_refusals_on_http_and_the_websocket_are_counted_for_the_dashboard(own_chat, own_server, user):
    chat, server = own_chat, own_server
    put_on_plan(user, "free", requests_per_minute=1)
    since = minute_of(time.time())
    chat.answer(chat.send("hello").json()["assistant_message"]["id"])

    assert chat.send("again").status_code == 429

    async def over_websocket():
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            await ws.send(json.dumps({"type": "send", "ref": "r", "content": "and again"}))
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    assert asyncio.run(over_websocket())["status"] == 429
    # Counted by the server after it sent each refusal: the HTTP one by the gate, the frame by the consumer.
    wait_until(lambda: sum(refusal_counts.per_minute(since, 2)["429"]) == 2, timeout=10, what="both refusals counted")
    assert sum(refusal_counts.per_minute(since, 2)["503"]) == 0

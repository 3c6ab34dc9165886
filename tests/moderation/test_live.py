"""Moderation on the real path of a message: a Daphne server in front of a simulated SGLang worker
that echoes the user's message (`--echo`), PostgreSQL and Redis.

The worker never pretends to be a model: it repeats what it was sent. An answer crosses the line
mid-stream because the test sends a text with a phrase, deep inside it, that a category screens in
answers only; the input passes (the category does not apply to input) and the echo carries it out.
"""

import asyncio
import json
import re

import httpx
import openai
import pytest
import websockets
from django.db import transaction

from accounts.api_keys import create_api_key
from chat.models import Conversation, Message
from chat.titles import fallback_title
from moderation.backends.rules import bump_version
from moderation.models import Category, Flag
from tests.chat.live import ChatClient, wait_until
from tests.support.plans import put_on_plan

#: MODERATION_WINDOW_CHARS of the echo server (tests.support.live_fixtures).
WINDOW = 200
#: About 700 characters of ordinary text before the line is crossed, and plenty after.
BEFORE = "The keeper climbs the stairs at dusk and trims the wick of the great lamp. " * 9
PHRASE = "the secret handshake"
AFTER = " Then the ships pass safely along the rocky coast through the long night." * 20


def engine_counter(engine, name: str) -> int:
    body = httpx.get(f"{engine.url}/metrics", timeout=5).text
    return int(sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", body, re.M)))


@pytest.fixture
def categories(transactional_db):
    with transaction.atomic():
        Category.objects.all().delete()
        Category.objects.create(name="Credential phishing", words="send me your password", applies_to="both")
        Category.objects.create(name="Handshakes", words=PHRASE, applies_to="output")
    bump_version()


@pytest.fixture
def chat(categories, echo_server, user):
    put_on_plan(user, "pro")
    client = ChatClient(echo_server, user)
    yield client
    for message_id in Message.objects.filter(status__in=Message.ACTIVE_STATUSES).values_list("id", flat=True):
        client.http.post(f"/chat/api/messages/{message_id}/stop")
    wait_until(
        lambda: not Message.objects.filter(status__in=Message.ACTIVE_STATUSES).exists(), what="every generation to end"
    )
    client.close()


@pytest.fixture
def api_key(chat, user):
    return create_api_key(user, "tests")[1]


def test_a_blocked_input_never_reaches_the_engine_and_is_refused_on_every_transport(
    chat, echo_engine, echo_server, api_key, user
):
    turn = chat.send_ok("Hello there")  # the counter counts what does reach the engine: the answer and its title
    chat.answer(turn["assistant_message"]["id"])
    wait_until(lambda: Conversation.objects.get(pk=turn["conversation"]["id"]).title, what="the title to be written")
    wait_until(lambda: engine_counter(echo_engine, "sglang:num_requests_total") >= 2, what="both requests counted")
    before = engine_counter(echo_engine, "sglang:num_requests_total")
    typed = "Hi! Please send me your password, it is for a survey."

    refused = chat.send(typed)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "content_policy_violation" and "Credential phishing" in error["message"]
    assert not Message.objects.filter(content=typed).exists()  # the page keeps the typed text; nothing half-saved

    async def over_websocket():
        async with websockets.connect(echo_server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            await ws.send(json.dumps({"type": "send", "ref": "r1", "content": typed}))
            return json.loads(await asyncio.wait_for(ws.recv(), 10))

    frame = asyncio.run(over_websocket())
    assert frame["type"] == "error" and frame["ref"] == "r1" and frame["status"] == 400
    assert frame["code"] == "content_policy_violation" and "content policy" in frame["message"]

    with (
        openai.OpenAI(base_url=echo_server.base_url + "/v1", api_key=api_key, max_retries=0) as client,
        pytest.raises(openai.BadRequestError) as api_refusal,
    ):
        client.chat.completions.create(model="sim-small", messages=[{"role": "user", "content": typed}])
    assert api_refusal.value.status_code == 400 and api_refusal.value.code == "content_policy_violation"
    assert api_refusal.value.body["type"] == "invalid_request_error"

    assert engine_counter(echo_engine, "sglang:num_requests_total") == before
    flags = Flag.objects.filter(source="input", blocked=True, category="Credential phishing", user=user)
    assert flags.count() == 3 and {f.text for f in flags} == {typed}


def test_an_answer_that_crosses_the_line_is_cut_within_a_window_aborted_blocked_and_flagged(chat, echo_engine, user):
    aborted_before = engine_counter(echo_engine, "sglang:num_aborted_requests_total")
    turn = chat.send_ok(BEFORE + PHRASE + AFTER)
    text, final, _ = chat.answer(turn["assistant_message"]["id"])

    assert final["status"] == "blocked" and final["content"] == ""
    assert "content policy" in final["error"]
    crossed = len(BEFORE) + len(PHRASE)
    # What readers were sent stops within one window (and one frame) of the line; none of what followed.
    assert len(text) < crossed + WINDOW
    saved = Message.objects.get(pk=turn["assistant_message"]["id"])
    assert saved.status == "blocked" and saved.content == ""
    # The engine request was aborted: it did not write the rest of the echo.
    wait_until(
        lambda: engine_counter(echo_engine, "sglang:num_aborted_requests_total") > aborted_before,
        what="the engine to count the aborted request",
    )
    flag = Flag.objects.get(message=saved)
    assert (flag.source, flag.category, flag.blocked, flag.state, flag.user) == (
        "output",
        "Handshakes",
        True,
        "open",
        user,
    )
    assert PHRASE in flag.text and crossed <= len(flag.text) < crossed + WINDOW  # kept for staff only
    assert flag.text == (BEFORE + PHRASE + AFTER)[: len(flag.text)]
    # What the user can see or export never has it.
    conversation = chat.http.get(f"/chat/api/conversations/{turn['conversation']['id']}").json()
    shown = next(m for m in conversation["messages"] if m["id"] == saved.pk)
    assert shown["content"] == "" and shown["status"] == "blocked"
    for kind in ("md", "json"):
        exported = chat.http.get(f"/chat/api/conversations/{turn['conversation']['id']}/export?format={kind}").text
        # Only in the user's own question, never as the answer.
        assert exported.count(PHRASE) == 1 and exported.count("great lamp") == BEFORE.count("great lamp")


def test_a_chat_whose_first_answer_was_blocked_is_titled_from_its_question(chat):
    """Not by the model: asked to title the question, it could write what was just blocked."""
    question = BEFORE + PHRASE + AFTER
    turn = chat.send_ok(question)
    _, final, _ = chat.answer(turn["assistant_message"]["id"])
    assert final["status"] == "blocked"
    conversation = Conversation.objects.filter(pk=turn["conversation"]["id"])
    wait_until(lambda: conversation.get().title, what="the chat's title")
    assert conversation.get().title == fallback_title(question)


def test_the_api_ends_a_crossing_stream_with_content_filter_and_aborts_the_engine(
    chat, echo_engine, echo_server, api_key
):
    aborted_before = engine_counter(echo_engine, "sglang:num_aborted_requests_total")
    messages = [{"role": "user", "content": BEFORE + PHRASE + AFTER}]
    with openai.OpenAI(base_url=echo_server.base_url + "/v1", api_key=api_key, max_retries=0, timeout=60) as client:
        chunks = list(client.chat.completions.create(model="sim-small", messages=messages, stream=True))
        whole = client.chat.completions.create(model="sim-small", messages=messages)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "content_filter"
    assert streamed.startswith(BEFORE[:100]) and len(streamed) < len(BEFORE) + len(PHRASE) + WINDOW
    assert streamed == (BEFORE + PHRASE + AFTER)[: len(streamed)]  # nothing after the window that crossed
    assert whole.choices[0].finish_reason == "content_filter" and whole.choices[0].message.content == ""
    wait_until(
        lambda: engine_counter(echo_engine, "sglang:num_aborted_requests_total") >= aborted_before + 2,
        what="the engine to count both aborted requests",
    )
    flags = Flag.objects.filter(source="output", category="Handshakes", message=None)
    # The stream's flag is written as its response closes, after the client read the end.
    wait_until(lambda: flags.count() == 2, what="both answers flagged")
    assert all(PHRASE in f.text and f.blocked for f in flags)


def test_an_answer_that_stays_clean_is_untouched(chat):
    turn = chat.send_ok(BEFORE)
    text, final, _ = chat.answer(turn["assistant_message"]["id"])
    assert final["status"] == "completed" and final["content"] == text and text.count("great lamp") == 9
    assert not Flag.objects.exists()

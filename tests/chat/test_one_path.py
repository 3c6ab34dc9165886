"""One path for every answer: the same rules, decided once, whatever transport asked.

Each rule of the driver (`chat/generation/run.py`) is exercised here through the four ways an answer
is asked for, over a real Daphne and a real simulated worker: the web send (then SSE), the WebSocket,
and `/v1/chat/completions` streamed and not. For each, the same outcome is read back in the
transport's own words (a saved message, or an OpenAI body or chunk stream) and against the ledger:

- the status rule (completed, blocked by moderation, failed before the first token);
- the usage rule (the engine's own counts; nothing billed when nothing was generated);
- the holds (the quota reservation and the admission place given back on every ending);
- the moderation windows (an answer that crosses the line is cut, its text never shown).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import httpx
import pytest
import websockets
from django.db import transaction

from accounts.api_keys import create_api_key
from billing.models import UsageRecord
from billing.quota_store import get_store
from billing.selectors import current_period
from chat.generation import admission
from chat.models import Conversation, Message
from harness.engines import start_simulator
from moderation.backends.rules import bump_version
from moderation.models import Category
from simulator import tokenizer
from tests.chat.live import ChatClient, wait_until
from tests.support.live_fixtures import HEARTBEAT_TTL
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

TRANSPORTS = ["web", "websocket", "api", "api-stream"]
PHRASE = "the secret handshake"
#: MODERATION_WINDOW_CHARS of the echo server (tests.support.live_fixtures).
WINDOW = 200
#: About 700 characters before the phrase, so it is met in a later moderation window, not the first.
CROSSING = (
    "The keeper climbs the stairs at dusk and trims the wick of the great lamp. " * 9
    + PHRASE
    + " Then the ships pass safely along the rocky coast through the long night." * 10
)


@dataclass
class Outcome:
    """An answer as its transport reported it, in the driver's words."""

    status: str  # completed, blocked, failed (an API error counts as failed)
    text: str
    usage: tuple[int, int, int] | None  # (prompt, cached, completion) the transport reported
    ledger: UsageRecord | None
    http_status: int = 200


def _ledger(generation_id: str) -> UsageRecord | None:
    return UsageRecord.objects.filter(generation_id=generation_id).first()


def _from_message(message: dict) -> Outcome:
    usage = (message["prompt_tokens"], message["cached_tokens"], message["completion_tokens"])
    return Outcome(message["status"], message["content"], usage, _ledger(str(message["id"])))


def _titled_chat(user) -> int:
    """A conversation that already has its title: the answer queues no title to be written after it
    (work that would still be running when the test ends and its tables are emptied)."""
    return Conversation.objects.create(owner=user, title="One path", model="sim-small").pk


def _web(server, user, content: str) -> Outcome:
    chat = ChatClient(server, user)
    try:
        response = chat.send(content, conversation_id=_titled_chat(user))
        assert response.status_code == 201, response.text
        _, final, _ = chat.answer(response.json()["assistant_message"]["id"])
        return _from_message(final)
    finally:
        chat.close()


def _websocket(server, user, content: str) -> Outcome:
    chat = ChatClient(server, user)
    chat_id = _titled_chat(user)

    async def ask() -> dict:
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
            await ws.recv()  # hello
            await ws.send(json.dumps({"type": "send", "ref": "r", "content": content, "conversation_id": chat_id}))
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
                assert frame["type"] != "error", frame
                if frame["type"] == "done":
                    return frame["message"]

    try:
        return _from_message(asyncio.run(ask()))
    finally:
        chat.close()


def _api(server, key: str, content: str, *, stream: bool) -> Outcome:
    body = {"model": "sim-small", "messages": [{"role": "user", "content": content}], "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        if not stream:
            response = http.post("/v1/chat/completions", json=body, headers=headers)
            if response.status_code != 200:
                return Outcome("failed", "", None, None, response.status_code)
            data = response.json()
            usage = data["usage"]
            choice = data["choices"][0]
            status = "blocked" if choice["finish_reason"] == "content_filter" else "completed"
            reported = (
                usage["prompt_tokens"],
                usage["prompt_tokens_details"]["cached_tokens"],
                usage["completion_tokens"],
            )
            return Outcome(status, choice["message"]["content"], reported, _ledger("api:" + data["id"][9:]))
        with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
            if response.status_code != 200:
                response.read()
                return Outcome("failed", "", None, None, response.status_code)
            chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    finish = next(c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
    usage = chunks[-1]["usage"]
    reported = (usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], usage["completion_tokens"])
    status = "blocked" if finish == "content_filter" else "completed"
    return Outcome(status, text, reported, _ledger("api:" + chunks[0]["id"][9:]))


def ask(transport: str, server, user, content: str) -> Outcome:
    if transport == "web":
        return _web(server, user, content)
    if transport == "websocket":
        return _websocket(server, user, content)
    key = create_api_key(user, f"one path {transport}")[1]
    return _api(server, key, content, stream=transport == "api-stream")


def assert_nothing_held(user) -> None:
    """Every hold of every ending given back: no quota reserved, no admission place taken."""
    wait_until(lambda: admission.in_flight() == 0, timeout=10, what="every admission place to be given back")
    _, held = get_store().snapshot(user.pk, current_period(user).period.key)
    assert held == 0, f"{held} tokens still held"


@pytest.fixture
def pro_user(transactional_db, user):
    put_on_plan(user, "pro")
    return user


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_answer_is_billed_the_engines_own_counts_and_gives_its_holds_back(transport, server, pro_user):
    outcome = ask(transport, server, pro_user, "Tell me about lighthouses.")

    assert outcome.status == "completed" and outcome.text
    assert outcome.ledger is not None
    assert (
        outcome.ledger.prompt_tokens,
        outcome.ledger.cached_tokens,
        outcome.ledger.completion_tokens,
    ) == outcome.usage
    assert outcome.usage[2] > 0 and outcome.usage[0] > 0
    assert_nothing_held(pro_user)


@pytest.fixture
def handshake_rule(transactional_db):
    with transaction.atomic():
        Category.objects.all().delete()
        Category.objects.create(name="Handshakes", words=PHRASE, applies_to="output")
    bump_version()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_answer_that_crosses_the_line_is_cut_never_shown_and_billed_what_was_written(
    transport, echo_server, handshake_rule, pro_user
):
    outcome = ask(transport, echo_server, pro_user, CROSSING)

    assert outcome.status == "blocked"
    if transport == "api-stream":
        # What was sent before the cut stays sent; nothing after the window that crossed the line.
        assert CROSSING.startswith(outcome.text)
        assert len(outcome.text) < CROSSING.index(PHRASE) + len(PHRASE) + WINDOW
    else:
        assert outcome.text == ""  # a saved (or whole) answer keeps no text at all
    # Cut mid-answer: the engine wrote part of it, which is what is billed.
    assert outcome.ledger is not None
    assert 0 < outcome.ledger.completion_tokens < len(tokenizer.encode(CROSSING))
    assert_nothing_held(pro_user)


@pytest.fixture(scope="module")
def failing_server(django_db_setup, django_db_blocker):
    """Every generation fails before its first token (the worker answers its health check)."""
    engine = start_simulator("--accept-any-model", "--fault-error-rate", "1.0")
    server = start_daphne(engine_url=engine.url, extra_env={"CHAT_HEARTBEAT_TTL_SECONDS": HEARTBEAT_TTL})
    yield server
    server.stop()
    engine.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_answer_that_fails_before_its_first_token_bills_nothing_and_holds_nothing(
    transport, failing_server, pro_user
):
    if transport in ("web", "websocket"):
        outcome = ask(transport, failing_server, pro_user, "Hello?")
        assert outcome.status == "failed" and outcome.text == ""
        assert outcome.usage == (0, 0, 0)
    else:
        outcome = ask(transport, failing_server, pro_user, "Hello?")
        assert outcome.status == "failed" and outcome.http_status >= 500
    assert not UsageRecord.objects.filter(user=pro_user).exists()
    assert not Message.objects.filter(status__in=Message.ACTIVE_STATUSES).exists()
    assert_nothing_held(pro_user)

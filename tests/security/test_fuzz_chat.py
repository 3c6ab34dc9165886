"""No body, query string or frame, however strange, makes the chat answer 5xx or drops its WebSocket.

Hypothesis writes what a buggy or hostile page could send to every JSON endpoint of the chat that
takes a body or reads a query string, and to the chat's WebSocket, on the live Daphne server, as the
owner of a conversation: each answer is a success or a 4xx with a JSON error that says why (503 only
with Retry-After), and the WebSocket answers with error frames and stays open (never 1011).
"""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.models import Plan
from chat.models import Message
from tests.security.authz_world import build_world
from tests.security.live_matrix import FRAME_DEADLINE, cookies_for, ws_headers
from tests.support.json_fuzz import ids, json_values, raw_bodies, raw_texts
from tests.support.sessions import csrf_headers, with_csrf

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

texts = st.text(max_size=40) | st.sampled_from(["", "a\x00b", "\ud800", "x" * 5000]) | json_values
flags = st.booleans() | json_values


def _object(fields: dict) -> st.SearchStrategy:
    """Objects with any of `fields` (each a likely value or anything), sometimes with a stranger, or
    anything at all in their place."""
    extra = {"surprise": json_values}
    return st.fixed_dictionaries({}, optional={**fields, **extra}) | json_values


#: (method, path, body) for each chat endpoint that reads a JSON body.
ENDPOINTS = {
    ("POST", "/chat/api/conversations"): _object(
        {"title": texts, "model": st.sampled_from(["sim-small", "nope"]) | texts, "system_prompt": texts}
    ),
    ("PATCH", "/chat/api/conversations/{conversation}"): _object(
        {"title": texts, "pinned": flags, "archived": flags, "model": texts, "system_prompt": texts}
    ),
    ("POST", "/chat/api/send"): _object(
        {"content": texts, "conversation_id": ids, "parent_id": ids, "model": st.just("sim-small") | texts}
    ),
    ("POST", "/chat/api/messages/{question}/edit"): _object({"content": texts}),
    ("PUT", "/chat/api/messages/{answer}/feedback"): _object(
        {"rating": st.sampled_from(["up", "down"]) | texts, "comment": texts}
    ),
    ("POST", "/chat/api/messages/{answer}/report"): _object({"reason": texts}),
    ("POST", "/chat/api/conversations/{conversation}/share"): _object(
        {
            "mode": st.sampled_from(["snapshot", "live"]) | texts,
            "show_owner_name": flags,
            "show_passages": flags,
            "leaf_id": ids,
        }
    ),
}
queries = st.dictionaries(
    st.sampled_from(["before", "leaf", "limit", "q", "archived", "format", "after"]),
    st.text(max_size=30) | st.sampled_from(["²", "٣", "9" * 5000, "1-1\n", "0-1"]),
    max_size=3,
)
QUERY_PATHS = [
    "/chat/api/conversations",
    "/chat/api/conversations/{conversation}",
    "/chat/api/conversations/{conversation}/export",
    "/chat/api/messages/{answer}/stream",
]


@pytest.fixture
def owner(transactional_db, server):
    """The owner of a conversation, on a plan roomy enough that the fuzz reaches past the rate limit."""
    world = build_world()
    Plan.objects.filter(slug="plus").update(requests_per_minute=100_000, tokens_per_month=10**12, answers_at_once=50)
    cookies = with_csrf(cookies_for(world, "owner"))
    headers = {**csrf_headers(server), "Content-Type": "application/json"}
    with httpx.Client(base_url=server.base_url, cookies=cookies, headers=headers, timeout=60) as http:
        yield world, http, cookies
        for message_id in Message.objects.filter(status__in=Message.ACTIVE_STATUSES).values_list("id", flat=True):
            http.post(f"/chat/api/messages/{message_id}/stop")


def _path(template: str, world) -> str:
    return template.format(conversation=world.conversation.pk, question=world.question.pk, answer=world.answer.pk)


def _answered_well(response: httpx.Response) -> None:
    status = response.status_code
    assert status < 500 or (status == 503 and response.headers.get("Retry-After")), (status, response.text[:300])
    if status >= 400:
        error = response.json()["error"]
        assert error["message"] and error["status"] == status, error


@FUZZ
@given(endpoint=st.sampled_from(sorted(ENDPOINTS)), data=st.data())
def test_no_json_body_makes_a_chat_endpoint_fail(owner, endpoint, data):
    world, http, _ = owner
    method, template = endpoint
    body = data.draw(raw_bodies(ENDPOINTS[endpoint]), label="body")
    _answered_well(http.request(method, _path(template, world), content=body))


@FUZZ
@given(template=st.sampled_from(QUERY_PATHS), params=queries)
def test_no_query_string_makes_a_chat_endpoint_fail(owner, template, params):
    world, http, _ = owner
    with http.stream("GET", _path(template, world), params=params) as response:
        response.read()  # a stream of a finished answer ends at once
    _answered_well(response)


COMMANDS = ["send", "regenerate", "continue", "attach", "detach", "stop"]
frames = _object(
    {
        "type": st.sampled_from(COMMANDS) | texts,
        "ref": json_values,
        "content": texts,
        "conversation_id": ids,
        "parent_id": ids,
        "message_id": ids,
        "model": texts,
        "after": st.sampled_from(["0-1", "٣-٣", "1-1\n", "9" * 30 + "-0"]) | texts,
    }
)
socket_frames = raw_texts(frames) | raw_bodies(frames)


async def _exchange(server, cookies: dict, frame: str | bytes) -> None:
    """Send one frame, then a probe; every frame before the probe's answer is a well-formed reply."""
    probe = f"probe-{uuid.uuid4().hex}"
    async with websockets.connect(
        server.ws_url + "/ws/chat/", additional_headers=ws_headers(server, cookies), max_size=None
    ) as ws:
        assert json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))["type"] == "hello"
        await ws.send(frame)
        await ws.send(json.dumps({"type": "probe", "ref": probe}))
        while True:
            try:
                reply = json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))
            except websockets.ConnectionClosed as closed:
                raise AssertionError(f"the socket was closed ({ws.close_code}) after {frame!r:.200}") from closed
            if reply["type"] == "error":
                assert reply["message"], reply
                assert reply["status"] < 500 or reply["status"] == 503, reply
                if reply["ref"] == probe:
                    return


@FUZZ
@given(frame=socket_frames)
def test_no_frame_makes_the_websocket_fail(owner, server, frame):
    _, _, cookies = owner
    asyncio.run(_exchange(server, cookies, frame))

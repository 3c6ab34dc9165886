"""Malformed input gets a 4xx with a sentence (an error frame on the WebSocket, which stays open), never a
500 or a dropped socket: a list where a word belongs, digits `int` cannot read, JSON nested thousands
deep, a binary frame. On the live Daphne server, as a program would send them.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets

from accounts.models import ApiKey
from chat.models import Message
from tests.security.authz_world import build_world
from tests.security.live_matrix import FRAME_DEADLINE, cookies_for, ws_headers

CSRF = "c" * 32
DEEP = "[" * 5000 + "]" * 5000
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000


def _refused_clearly(response: httpx.Response, status: int | tuple = 400) -> dict:
    statuses = status if isinstance(status, tuple) else (status,)
    assert response.status_code in statuses, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["message"] and len(error["message"]) < 500, error
    return error


@pytest.fixture
def world(transactional_db):
    return build_world()


@pytest.fixture
def owner_http(world, server):
    cookies = {**cookies_for(world, "owner"), "csrftoken": CSRF}
    headers = {"X-CSRFToken": CSRF, "Referer": server.base_url + "/", "Content-Type": "application/json"}
    with httpx.Client(base_url=server.base_url, cookies=cookies, headers=headers, timeout=60) as http:
        yield http
    for message_id in Message.objects.filter(status__in=Message.ACTIVE_STATUSES).values_list("id", flat=True):
        httpx.post(f"{server.base_url}/chat/api/messages/{message_id}/stop", cookies=cookies, headers=headers)


def _api(server, body: str | bytes, key: str | None) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(server.base_url + "/v1/chat/completions", content=body, headers=headers, timeout=60)


@pytest.mark.parametrize(
    "message",
    [
        {"role": ["user"], "content": "hi"},
        {"role": {"user": 1}, "content": "hi"},
        {"role": "r" * 100_000, "content": "hi"},
    ],
    ids=["role_list", "role_object", "role_huge"],
)
def test_a_role_that_is_not_a_word_gets_400_naming_the_field(world, server, message):
    response = _api(server, json.dumps({"model": "sim-small", "messages": [message]}), world.api_key)
    error = _refused_clearly(response)
    assert error["param"] == "messages[0].role"


def test_unknown_fields_are_named_briefly(world, server):
    response = _api(server, json.dumps({"model": "sim-small", "messages": [], "x" * 100_000: 1}), world.api_key)
    _refused_clearly(response)


@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["lists", "objects"])
def test_json_nested_5000_deep_on_the_api(world, server, body):
    # Without a key the key is what is missing, and the body is never parsed.
    assert "API key" in _refused_clearly(_api(server, body, None), 401)["message"]
    assert "nest" in _refused_clearly(_api(server, body, world.api_key))["message"]


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/chat/api/conversations"),
        ("PATCH", "/chat/api/conversations/{conversation}"),
        ("POST", "/chat/api/send"),
        ("POST", "/chat/api/messages/{question}/edit"),
        ("PUT", "/chat/api/messages/{answer}/feedback"),
        ("POST", "/chat/api/messages/{answer}/report"),
        ("POST", "/chat/api/conversations/{conversation}/share"),
    ],
)
@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["lists", "objects"])
def test_json_nested_5000_deep_on_the_chat_endpoints(world, server, owner_http, method, path, body):
    path = path.format(conversation=world.conversation.pk, question=world.question.pk, answer=world.answer.pk)
    assert "nest" in _refused_clearly(owner_http.request(method, path, content=body))["message"]
    anonymous = httpx.request(method, server.base_url + path, content=body, timeout=60)
    assert anonymous.status_code in (401, 403), anonymous.status_code


@pytest.mark.parametrize("name", ["before", "leaf", "limit"])
@pytest.mark.parametrize(
    "value",
    ["²", "٣", "¹²", "9" * 5000, "9" * 30, "-1", " 1"],
    ids=["superscript", "arabic_indic", "superscripts", "5000_digits", "30_digits", "negative", "space"],
)
def test_a_page_of_a_conversation_with_a_number_int_cannot_read(world, owner_http, name, value):
    response = owner_http.get(f"/chat/api/conversations/{world.conversation.pk}", params={name: value})
    _refused_clearly(response)


def test_revoking_a_shared_link_by_an_id_int_cannot_read(world, owner_http):
    for value in ("²", "9" * 5000):
        response = owner_http.post(
            "/accounts/shared-links/",
            content=str(httpx.QueryParams({"revoke": value})).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/html"},
        )
        assert response.status_code == 400, response.status_code
        assert "shared link" in response.text


def test_an_api_key_id_in_other_digits_revokes_nothing(world, owner_http):
    arabic_indic = str(world.api_key_id).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    for value in (arabic_indic, "²", "9" * 5000):
        response = owner_http.post(
            "/accounts/api-keys/",
            content=str(httpx.QueryParams({"revoke": value})).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/html"},
        )
        assert response.status_code == 400, (value, response.status_code)
        assert "not a key id" in response.text
    assert ApiKey.objects.get(pk=world.api_key_id).revoked_at is None


@pytest.mark.parametrize("after", ["٣-٣", "1-1\n", "1-" + "9" * 5000], ids=["arabic_indic", "newline", "long"])
def test_an_answer_stream_resumed_from_an_id_that_is_not_one(world, owner_http, after):
    response = owner_http.get(f"/chat/api/messages/{world.answer.pk}/stream", params={"after": after})
    _refused_clearly(response)


async def _socket_exchange(server, cookies: dict, sends: list) -> list[dict]:
    """Send each frame (text or bytes) and collect the reply to it; then show the socket still answers."""
    replies = []
    async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=ws_headers(server, cookies)) as ws:
        assert json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))["type"] == "hello"
        for frame in sends:
            await ws.send(frame)
            replies.append(json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE)))
        await ws.send(json.dumps({"type": "no-such-type", "ref": "alive"}))
        reply = json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))
        assert reply["ref"] == "alive" and reply["type"] == "error", reply
    return replies


@pytest.mark.parametrize(
    "frame",
    [
        b'{"type": "send", "content": "hi"}',
        b"\xff\x00binary",
        json.dumps({"type": ["send"], "ref": "r"}),
        json.dumps({"type": {"send": 1}, "ref": "r"}),
        json.dumps({"type": "t" * 100_000, "ref": "r"}),
        DEEP,
        DEEP_OBJECT,
        '{"type": "send", "ref": ' + DEEP + "}",
        "not json",
        "",
    ],
    ids=[
        "binary_json",
        "binary",
        "type_list",
        "type_object",
        "type_huge",
        "deep_lists",
        "deep_objects",
        "deep_ref",
        "not_json",
        "empty",
    ],
)
def test_a_malformed_websocket_frame_gets_an_error_frame_and_the_socket_stays_open(world, server, frame):
    [reply] = asyncio.run(_socket_exchange(server, cookies_for(world, "owner"), [frame]))
    assert reply["type"] == "error" and reply["status"] == 400, reply
    assert reply["message"] and len(reply["message"]) < 500, reply


@pytest.mark.parametrize("after", ["٣-٣", "1-1\n"], ids=["arabic_indic", "newline"])
def test_attaching_from_an_id_that_is_not_one_gets_an_error_frame(world, server, after):
    frame = json.dumps({"type": "attach", "ref": "a", "message_id": world.answer.pk, "after": after})
    [reply] = asyncio.run(_socket_exchange(server, cookies_for(world, "owner"), [frame]))
    assert reply["type"] == "error" and reply["status"] == 400 and reply["ref"] == "a", reply

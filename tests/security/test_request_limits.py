"""Request size limits: a body (or WebSocket frame) over the limit is refused with 413 and a sentence.

The limit is Django's DATA_UPLOAD_MAX_MEMORY_SIZE (settings: REQUEST_MAX_BYTES). Every route that
takes a body is read from the authorization matrix's table, so a new one is covered at once.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets
from django.conf import settings as django_settings

from chat.models import Message
from tests.security.authz_world import build_world
from tests.security.expected_access import EXPECTED
from tests.security.live_matrix import FRAME_DEADLINE, cookies_for, ws_headers
from tests.security.matrix import JSON_PREFIX
from tests.support.sessions import CSRF, csrf_headers, with_csrf

BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")
SMALL_LIMIT = 4096


def _acting(route: str) -> str:
    return "staff" if route.startswith("/admin/") else "owner"


def body_routes() -> list[tuple[str, str]]:
    """(route, method) for every method that is not 405 to the actor who can use the route."""
    found = []
    for route, methods in EXPECTED.items():
        for method, row in methods.items():
            statuses = dict(zip(("anonymous", "other", "moderator", "staff", "owner"), row.split(), strict=True))
            if method in BODY_METHODS and statuses[_acting(route)] != "405":
                found.append((route, method))
    return found


def _path(route: str, world) -> str:
    from tests.security.matrix import values_for
    from tests.security.routes import Route, fill

    return fill(route, values_for(Route(route, "", None), world))


def _is_a_sentence_about_size(response) -> str:
    if response["Content-Type"].startswith("application/json"):
        message = json.loads(response.content)["error"]["message"]
    else:
        message = response.content.decode()
    assert "too large" in message and "bytes" in message, message
    return message


def test_the_limits_are_set_where_everyone_can_see_them():
    assert django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 2_621_440
    # Below Daphne's own WebSocket limit (1 MiB), so a frame over ours is answered, not dropped.
    assert django_settings.WS_MAX_FRAME_BYTES < 1024 * 1024
    # The longest chat message fits in a frame even when every character is sent as a \uXXXX pair.
    assert django_settings.CHAT_MAX_MESSAGE_CHARS * 12 + 200 < django_settings.WS_MAX_FRAME_BYTES


def test_every_route_that_takes_a_body_refuses_one_over_the_limit_with_413_and_a_sentence(db, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = SMALL_LIMIT
    world = build_world()
    routes = body_routes()
    assert len(routes) > 100  # the admin's forms, the chat's JSON endpoints, the account's forms, the API
    wrong = []
    for route, method in routes:
        client = world.client(_acting(route))
        path = _path(route, world)
        if route.startswith((JSON_PREFIX, "/v1/")):
            body = json.dumps({"content": "x" * (SMALL_LIMIT + 1)})
            response = client.generic(method, path, body, content_type="application/json")
        else:
            body = "name=" + "x" * (SMALL_LIMIT + 1)
            response = client.generic(method, path, body, content_type="application/x-www-form-urlencoded")
        if response.status_code != 413:
            wrong.append(f"{method} {route}: {response.status_code}")
            continue
        _is_a_sentence_about_size(response)
    assert not wrong, "not refused with 413:\n  " + "\n  ".join(wrong)


def test_a_body_within_the_limit_is_read_as_usual(db, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = SMALL_LIMIT
    world = build_world()
    client = world.client("owner")
    title = "t" * 100
    padding = "p" * (SMALL_LIMIT - 300)
    body = json.dumps({"title": title, "padding": padding})
    assert len(body) < SMALL_LIMIT
    response = client.post("/chat/api/conversations", body, content_type="application/json")
    assert response.status_code == 201, response.content


def test_the_api_answers_413_in_openai_s_shape(db, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = SMALL_LIMIT
    world = build_world()
    body = json.dumps({"model": "sim-small", "messages": [{"role": "user", "content": "x" * SMALL_LIMIT}]})
    response = world.client("anonymous").post(
        "/v1/chat/completions", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {world.api_key}"
    )
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "too_large"
    assert error["type"] == "invalid_request_error"
    assert "too large" in error["message"]


def test_over_the_real_server_the_default_limit_holds_on_every_transport(transactional_db, server):
    """Daphne in front: the chat's JSON, a form, the API and the WebSocket, at the default limit."""
    world = build_world()
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    huge = "x" * (limit + 1)
    cookies = with_csrf(cookies_for(world, "owner"))
    headers = csrf_headers(server)
    with httpx.Client(base_url=server.base_url, cookies=cookies, headers=headers, timeout=60) as http:
        sent = http.post("/chat/api/send", json={"content": huge})
        assert sent.status_code == 413, sent.text
        assert "too large" in sent.json()["error"]["message"]

        form = http.post("/accounts/api-keys/", data={"name": huge, "csrfmiddlewaretoken": CSRF})
        assert form.status_code == 413
        assert "too large" in form.text

    api = httpx.post(
        server.base_url + "/v1/chat/completions",
        json={"model": "sim-small", "messages": [{"role": "user", "content": huge}]},
        headers={"Authorization": f"Bearer {world.api_key}"},
        timeout=60,
    )
    assert api.status_code == 413
    assert "too large" in api.json()["error"]["message"]

    async def over_websocket():
        async with websockets.connect(
            server.ws_url + "/ws/chat/", additional_headers=ws_headers(server, cookies), max_size=None
        ) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))["type"] == "hello"
            frame = "x" * (django_settings.WS_MAX_FRAME_BYTES + 1)
            await ws.send(json.dumps({"type": "send", "ref": "big", "content": frame}))
            refused = json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))
            # The socket stays usable: the next frame is answered as usual.
            await ws.send(json.dumps({"type": "stop", "ref": "next", "message_id": world.answer.pk}))
            after = json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))
            return refused, after

    refused, after = asyncio.run(over_websocket())
    assert refused["type"] == "error" and refused["status"] == 413, refused
    assert refused["ref"] is None or refused["ref"] == "big"
    assert "too large" in refused["message"]
    assert after["ref"] == "next" and after["type"] == "stopping", after
    assert not Message.objects.filter(content=huge).exists()


@pytest.mark.parametrize("route", ["/chat/api/send"])
def test_a_refused_body_saves_nothing(db, settings, route):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = SMALL_LIMIT
    world = build_world()
    before = Message.objects.count()
    response = world.client("owner").post(
        route, json.dumps({"content": "y" * SMALL_LIMIT}), content_type="application/json"
    )
    assert response.status_code == 413
    assert Message.objects.count() == before

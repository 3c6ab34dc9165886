"""Request size limits: a body (or WebSocket frame) over the limit is refused with 413 and a sentence.

The limit is Django's DATA_UPLOAD_MAX_MEMORY_SIZE (settings: REQUEST_MAX_BYTES). Every route that
takes a body is read from the authorization matrix's table, so a new one is covered at once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import websockets
from django.conf import settings as django_settings

from chat.models import Message
from tests.security.authz_world import build_world
from tests.security.expected_access import EXPECTED
from tests.security.live_matrix import FRAME_DEADLINE, cookies_for, ws_headers
from tests.security.matrix import JSON_PREFIX
from tests.support.servers import start_daphne
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


HUGE_BODY = 150 * 1024 * 1024


@pytest.fixture
def measured_server(transactional_db):
    """A Daphne process of the test's own, whose peak memory it reads."""
    server = start_daphne(engine_url="http://127.0.0.1:9")  # no answer is generated here
    yield server
    server.stop()


def _peak_memory(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


def _megabytes(size: int):
    block = b"x" * (1024 * 1024)
    for start in range(0, size, len(block)):
        yield block[: min(len(block), size - start)]


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_huge_body_is_refused_on_every_asgi_route_without_the_server_keeping_it(
    transactional_db, measured_server, declared
):
    """150 MB, with its length declared or chunked without one, to the answer stream (a Channels consumer
    that reads the whole body before anything else), a chat endpoint and the API: each gets 413 with a
    sentence, and the server's peak memory does not grow by anything like the body's size."""
    before = _peak_memory(measured_server.process.pid)
    for path in ("/chat/api/messages/1/stream", "/chat/api/send", "/v1/chat/completions"):
        headers = {"Content-Type": "application/json"}
        if declared:
            headers["Content-Length"] = str(HUGE_BODY)
        response = httpx.post(
            measured_server.base_url + path, content=_megabytes(HUGE_BODY), headers=headers, timeout=120
        )
        assert response.status_code == 413, (path, response.status_code, response.text[:300])
        assert "too large" in response.json()["error"]["message"], path
    grown = _peak_memory(measured_server.process.pid) - before
    assert grown < HUGE_BODY // 4, f"the server's peak memory grew by {grown / 2**20:.0f} MB"


def test_a_huge_upload_is_refused_past_the_upload_limit_without_the_server_keeping_it(
    transactional_db, measured_server
):
    """The file upload route takes bodies up to DOCUMENTS_UPLOAD_MAX_BYTES (51 MiB), not REQUEST_MAX_BYTES:
    150 MB there gets 413 with the sentence, and the server keeps no more than that limit of it."""
    before = _peak_memory(measured_server.process.pid)
    response = httpx.post(
        measured_server.base_url + "/chat/api/files",
        content=_megabytes(HUGE_BODY),
        headers={"Content-Type": "multipart/form-data; boundary=x", "Content-Length": str(HUGE_BODY)},
        timeout=120,
    )
    assert response.status_code == 413, (response.status_code, response.text[:300])
    assert "too large" in response.json()["error"]["message"]
    grown = _peak_memory(measured_server.process.pid) - before
    assert grown < HUGE_BODY // 2, f"the server's peak memory grew by {grown / 2**20:.0f} MB"


async def test_a_body_without_a_length_stops_being_read_once_it_passes_the_limit(settings):
    """Under a server that hands the body over as it arrives (not Daphne, which config/server.py bounds
    itself): chunks are counted as the application reads them; past the limit it reads no more, and the
    answer is 413 with the sentence."""
    from config.asgi import application

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = SMALL_LIMIT
    chunk = b"x" * 1024
    pulled = 0
    sent: list[dict] = []

    async def endless_body():
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/chat/api/messages/1/stream",
        "headers": [(b"host", b"testserver"), (b"transfer-encoding", b"chunked")],
        "query_string": b"",
    }
    await asyncio.wait_for(application(scope, endless_body, send), 30)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert start["status"] == 413
    assert "too large" in json.loads(body)["error"]["message"]
    assert pulled == SMALL_LIMIT // len(chunk) + 1  # the chunk that passed the limit, and no further

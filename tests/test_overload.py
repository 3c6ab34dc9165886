"""Overload is a 503 with Retry-After and a sentence, never a 500 (nor a crash while rendering the 500 page)."""

import asyncio
import json
import time
import uuid

import httpx
import psycopg
import pytest
from csp.utils import build_policy
from django.conf import settings

from config import overload
from config.edge import http_edge
from config.overload import ConcurrencyGate, LoopLag
from tests.support.servers import start_daphne


async def _call(app, path: str) -> tuple[int, dict, bytes]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app({"type": "http", "path": path, "method": "GET", "headers": []}, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


def _held_app():
    """An app that answers 200 only once the returned event is set."""
    release = asyncio.Event()

    async def slow_app(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return slow_app, release


def _held_gate() -> tuple[ConcurrencyGate, asyncio.Event]:
    """A gate in front of an app that answers 200 only once the returned event is set."""
    slow_app, release = _held_app()
    return ConcurrencyGate(slow_app), release


async def test_the_gate_refuses_at_once_beyond_the_limit_and_counts_until_the_response_starts(settings):
    settings.WEB_MAX_CONCURRENT_REQUESTS = 2
    gate, release = _held_gate()
    busy = [asyncio.create_task(_call(gate, "/chat/api/send")) for _ in range(2)]
    await asyncio.sleep(0)
    status, headers, body = await asyncio.wait_for(_call(gate, "/chat/api/send"), 1)
    assert status == 503 and headers[b"retry-after"] == b"2"
    assert json.loads(body)["error"]["code"] == "busy"
    api_status, _, api_body = await _call(gate, "/v1/chat/completions")
    assert api_status == 503 and json.loads(api_body)["error"]["type"] == "server_error"  # OpenAI's shape
    page_status, page_headers, page = await _call(gate, "/")
    assert page_status == 503 and page_headers[b"content-type"].startswith(b"text/html") and b"busy" in page

    release.set()
    assert [(await task)[0] for task in busy] == [200, 200]
    assert gate.active == 0
    assert (await _call(gate, "/chat/api/send"))[0] == 200  # room again


async def test_the_gates_own_503_carries_the_headers_every_page_carries(settings):
    """The gate answers before Django's middleware runs; its refusal must not be the one response without
    the policy, nosniff or the framing ban."""
    settings.WEB_MAX_CONCURRENT_REQUESTS = 1
    held, release = _held_app()
    application = http_edge(held)  # as config/asgi.py stacks them: the headers are added outside the gate
    busy = asyncio.create_task(_call(application, "/"))
    await asyncio.sleep(0)
    for path in ("/", "/chat/api/send", "/v1/chat/completions"):
        status, headers, _ = await asyncio.wait_for(_call(application, path), 1)
        assert status == 503
        assert headers[b"content-security-policy"] == build_policy().encode()
        assert headers[b"x-content-type-options"] == b"nosniff"
        assert headers[b"x-frame-options"] == settings.X_FRAME_OPTIONS.encode()
        assert headers[b"referrer-policy"] == settings.SECURE_REFERRER_POLICY.encode()
        assert headers[b"cross-origin-opener-policy"] == settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode()
    release.set()
    await busy


async def test_the_loop_lag_probe_sees_a_loop_that_runs_late():
    lag = LoopLag()
    lag.current()  # starts the probe
    for _ in range(8):
        time.sleep(0.2)  # work that keeps the loop from everything else, again and again
        await asyncio.sleep(0.001)
    assert lag.current() > 100


async def test_the_gate_refuses_new_requests_while_the_loop_runs_late(settings, monkeypatch):
    settings.WEB_MAX_LOOP_LAG_MS = 250
    lateness = {"ms": 600.0}
    monkeypatch.setattr(overload.loop_lag, "current", lambda: lateness["ms"])

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    gate = ConcurrencyGate(app)
    status, headers, body = await _call(gate, "/chat/api/send")
    assert status == 503 and headers[b"retry-after"] == b"2" and json.loads(body)["error"]["code"] == "busy"
    assert (await _call(gate, "/healthz"))[0] == 200  # load balancers still see it alive
    assert (await _call(gate, "/chat/api/messages/7/stream"))[0] == 200  # reading an accepted answer is not new work
    lateness["ms"] = 20.0
    assert (await _call(gate, "/chat/api/send"))[0] == 200
    settings.WEB_MAX_LOOP_LAG_MS = 0  # the check turned off
    lateness["ms"] = 600.0
    assert (await _call(gate, "/chat/api/send"))[0] == 200


@pytest.fixture
def database_that_refuses_connections(transactional_db):
    """A role PostgreSQL accepts no connection for: what "too many clients" looks like to the product."""
    role = f"sglchat_full_{uuid.uuid4().hex[:8]}"
    db = settings.DATABASES["default"]
    admin = psycopg.connect(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"], dbname=db["NAME"], autocommit=True
    )
    admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 0')
    yield f"postgres://{role}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    admin.execute(f'DROP ROLE "{role}"')
    admin.close()


def test_a_database_that_cannot_serve_gives_503_with_retry_after_on_every_kind_of_request(
    database_that_refuses_connections, engine
):
    server = start_daphne(
        engine_url=engine.url,
        database=database_that_refuses_connections,
        require_database=False,
        extra_env={"DATABASE_POOL_TIMEOUT_SECONDS": "1"},
    )
    try:
        cookies = {settings.SESSION_COOKIE_NAME: "a" * 32}  # a session the server must look up
        with httpx.Client(base_url=server.base_url, cookies=cookies, timeout=30) as http:
            for path, headers in (
                ("/", {}),
                ("/chat/api/conversations", {}),
                ("/v1/models", {"Authorization": "Bearer sk-sgl-whatever"}),
            ):
                response = http.get(path, headers=headers)
                assert response.status_code == 503, (path, response.status_code, response.text[:300])
                assert int(response.headers["Retry-After"]) > 0
                assert "busy" in response.text
        assert "has no attribute '_session_cache'" not in server.log()
    finally:
        server.stop()


def test_a_loops_lateness_is_not_carried_to_the_next_loop():
    """The lateness of a loop that has ended (a test's, a Celery task's) says nothing of the next one: before,
    the probe it had started never finished, so the next loop read the dead loop's last figure and every
    request of a later test in the same process was refused as "busy"."""
    lag = LoopLag()

    async def late_loop() -> float:
        lag.current()
        for _ in range(8):
            time.sleep(0.2)  # the loop kept from everything else
            await asyncio.sleep(0.001)
        return lag.current()

    async def next_loop() -> float:
        return lag.current()

    assert asyncio.run(late_loop()) > 100
    assert asyncio.run(next_loop()) == 0.0

"""Every HTTP response of the ASGI application carries the security headers, whoever wrote it: Django's
pages and errors, the answer stream (a Channels consumer beside Django), the overload gate's 503, the
body limit's 413. None names the server software. On the real Daphne."""

from __future__ import annotations

import threading

import httpx
import pytest
from django.conf import settings

from harness.engines import start_simulator
from tests.security.authz_world import build_world
from tests.security.live_matrix import cookies_for
from tests.support.servers import start_daphne
from tests.support.sessions import CSRF, csrf_headers, with_csrf
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SECURITY_HEADERS = (
    "content-security-policy",
    "x-content-type-options",
    "x-frame-options",
    "referrer-policy",
    "cross-origin-opener-policy",
)


@pytest.fixture(scope="module")
def one_at_a_time(django_db_setup, django_db_blocker):
    """Daphne admitting one request at a time, in front of an engine whose answers take seconds: a
    completion that is not streamed holds the one place until its answer is whole."""
    engine = start_simulator(
        "--accept-any-model", "--decode-step-time", "0.01", "--min-answer-tokens", "300", "--max-answer-tokens", "300"
    )
    server = start_daphne(engine_url=engine.url, extra_env={"WEB_MAX_CONCURRENT_REQUESTS": "1"})
    yield server
    server.stop()
    engine.stop()


def header_problems(response: httpx.Response) -> list[str]:
    """What is wrong with the response's headers: each security header exactly once, with its value,
    and no Server header."""
    headers = response.headers
    problems = [
        f"{name} x{len(headers.get_list(name))}" for name in SECURITY_HEADERS if len(headers.get_list(name)) != 1
    ]
    expected = {
        "x-content-type-options": "nosniff",
        "x-frame-options": settings.X_FRAME_OPTIONS,
        "referrer-policy": settings.SECURE_REFERRER_POLICY,
        "cross-origin-opener-policy": settings.SECURE_CROSS_ORIGIN_OPENER_POLICY,
    }
    problems += [f"{name}: {headers[name]!r}" for name, value in expected.items() if headers.get(name, value) != value]
    if "frame-ancestors 'none'" not in headers.get("content-security-policy", "frame-ancestors 'none'"):
        problems.append("the policy allows framing")
    if "server" in headers:
        problems.append(f"server: {headers['server']!r}")
    return problems


def test_every_kind_of_response_carries_the_security_headers_and_no_server_name(one_at_a_time):
    server = one_at_a_time
    world = build_world()
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    owner = with_csrf(cookies_for(world, "owner"))
    stream = f"/chat/api/messages/{world.answer.pk}/stream"
    anonymous = httpx.Client(base_url=server.base_url, timeout=60)
    signed_in = httpx.Client(
        base_url=server.base_url,
        cookies=owner,
        headers=csrf_headers(server),
        timeout=60,
    )
    seen = {
        "the landing page": (anonymous.get("/"), 200),
        "the chat page": (signed_in.get("/"), 200),
        "a 404 page": (anonymous.get("/no-such-page/"), 404),
        "the health check": (anonymous.get("/healthz"), 200),
        "the answer stream": (signed_in.get(stream), 200),
        "the answer stream, signed out": (anonymous.get(stream), 401),
        "the answer stream of no answer": (signed_in.get("/chat/api/messages/999999999/stream"), 404),
        "the answer stream, posted to": (anonymous.post(stream), 405),
        "a JSON body over the limit": (signed_in.post("/chat/api/send", json={"content": "x" * (limit + 1)}), 413),
        "a form over the limit": (
            signed_in.post("/accounts/api-keys/", data={"name": "x" * (limit + 1), "csrfmiddlewaretoken": CSRF}),
            413,
        ),
        "the API without a key": (anonymous.get("/v1/models"), 401),
        "the API with a bad body": (
            anonymous.post("/v1/chat/completions", content=b"{", headers={"Authorization": f"Bearer {world.api_key}"}),
            400,
        ),
    }

    # The gate's own 503: while a completion holds the one place, the next request is refused.
    finished = threading.Event()

    def hold_the_place():
        # Retried while a probe below holds the place itself.
        while True:
            held = httpx.post(
                server.base_url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {world.api_key}"},
                json={"model": "sim-small", "messages": [{"role": "user", "content": "A long story, please."}]},
                timeout=120,
            )
            if held.status_code != 503:
                break
        finished.set()

    holder = threading.Thread(target=hold_the_place)
    holder.start()
    seen["the overload gate's 503"] = (
        wait_until(lambda: (r := anonymous.get("/")).status_code == 503 and r, what="a 503 from the gate"),
        503,
    )
    holder.join(timeout=120)
    assert finished.is_set()

    for what, (response, status) in seen.items():
        assert response.status_code == status, (what, response.status_code, response.text[:300])
    wrong = {what: problems for what, (response, _) in seen.items() if (problems := header_problems(response))}
    assert wrong == {}
    # Django's own policy (with the page's nonce) is the one a page carries, not replaced by a second.
    assert "'nonce-" in seen["the chat page"][0].headers["content-security-policy"]
    anonymous.close()
    signed_in.close()

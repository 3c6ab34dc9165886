"""An API key is never written to a log: not when it is made, used, mistyped or revoked.

A live Daphne logging at DEBUG, in production's JSON lines, with its access log, and the simulated
worker it calls: after a key's whole life through the page and the API, neither log holds the key
or its secret part (the short prefix the key list shows may appear).
"""

from __future__ import annotations

import re

import httpx
import pytest

from accounts.api_keys import SHOWN_PREFIX_LENGTH
from accounts.models import ApiKey
from harness.engines import start_simulator
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne
from tests.support.sessions import CSRF, browser_cookies, csrf_headers

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def logged_stack():
    engine = start_simulator("--accept-any-model")
    server = start_daphne(engine_url=engine.url, extra_env={"LOG_LEVEL": "DEBUG", "LOG_JSON": "1"})
    yield engine, server
    server.stop()
    engine.stop()


def test_a_keys_whole_life_leaves_it_in_no_log(logged_stack, user):
    engine, server = logged_stack
    put_on_plan(user, "pro")
    page = httpx.Client(
        base_url=server.base_url,
        cookies=browser_cookies(user),
        headers=csrf_headers(server),
        timeout=30,
    )
    made = page.post("/accounts/api-keys/", data={"name": "laptop", "csrfmiddlewaretoken": CSRF})
    assert made.status_code == 303, (made.status_code, made.headers.get("location"))
    raw = re.search(r"sk-sgl-[A-Za-z0-9_-]{20,}", page.get("/accounts/api-keys/").text).group(0)
    secret = raw[SHOWN_PREFIX_LENGTH:]
    mistyped = raw[:-4] + ("aaaa" if not raw.endswith("aaaa") else "bbbb")

    api = httpx.Client(base_url=server.base_url, timeout=60)
    bearer = {"Authorization": f"Bearer {raw}"}
    body = {"model": "sim-small", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}
    assert api.get("/v1/models", headers=bearer).status_code == 200
    assert api.post("/v1/chat/completions", json=body, headers=bearer).status_code == 200
    with api.stream("POST", "/v1/chat/completions", json={**body, "stream": True}, headers=bearer) as streamed:
        assert streamed.status_code == 200
        streamed.read()
    assert (
        api.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {mistyped}"}).status_code == 401
    )
    assert api.post("/v1/chat/completions", json={"model": 1}, headers=bearer).status_code == 400

    key = ApiKey.objects.get(user=user)
    revoked = page.post(f"/accounts/api-keys/{key.pk}/revoke/", data={"csrfmiddlewaretoken": CSRF})
    assert revoked.is_redirect
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert api.post("/v1/chat/completions", json=body, headers=bearer).status_code == 401

    logs = {"Daphne": server.log(), "the simulated worker": engine.log()}
    assert '"level": "DEBUG"' in logs["Daphne"]  # it really logged at DEBUG, in JSON lines
    assert "/v1/chat/completions" in logs["Daphne"]  # and its access log is in it
    for name, text in logs.items():
        for what, value in (("the key", raw), ("its secret part", secret), ("a mistyped key", mistyped)):
            assert value not in text, f"{what} is in {name}'s log"

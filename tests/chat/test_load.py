"""Under load the product refuses with 503 and loses nothing: 300 concurrent streams on one live Daphne.

A third of the clients use the API (streamed), the rest the web path (send, then follow the answer over
SSE, as the page does, coming back after Retry-After when refused). The server is deliberately small (a
short database pool, a low concurrency limit, a hard admission limit under the offered load) so that
refusals happen: every refusal must be a 503 or 429 with Retry-After, never a 500; every accepted message
must end in a final state; every answer must have exactly one ledger row.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter

import httpx
import pytest

from accounts.api_keys import create_api_key
from billing.models import UsageRecord
from chat.models import Message
from harness.engines import start_simulator
from tests.conftest import make_user
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne
from tests.support.sessions import browser_cookies, csrf_headers
from tests.support.waiting import wait_until

STREAMS = 300
USERS = 10


@pytest.fixture
def small_stack(transactional_db):
    engine = start_simulator("--accept-any-model", "--max-running-requests", "64", speed="instant")
    server = start_daphne(
        engine_url=engine.url,
        extra_env={
            "WEB_MAX_CONCURRENT_REQUESTS": "64",
            "DATABASE_POOL_MAX_SIZE": "4",
            "DATABASE_POOL_TIMEOUT_SECONDS": "1",
            "ADMISSION_SOFT_LIMIT": "100",
            "ADMISSION_HARD_LIMIT": "150",
            "CHAT_HEARTBEAT_TTL_SECONDS": "5",
            "WEB_MAX_LOOP_LAG_MS": "250",
        },
    )
    yield engine, server
    server.stop()
    engine.stop()


async def _retrying(request, statuses: Counter, attempts: int = 30) -> httpx.Response:
    """Send until the answer is not a refusal, waiting as Retry-After says (the page does the same)."""
    for _ in range(attempts):
        response = await request()
        statuses[response.status_code] += 1
        if response.status_code not in (429, 503):
            return response
        assert response.headers.get("Retry-After"), response.text
        await response.aread()
        await asyncio.sleep(min(float(response.headers["Retry-After"]), 2) * random.uniform(0.5, 1.0))
    return response


class ClientFailed(AssertionError):
    """One client's failure, with what it was doing: "web 65, following /chat/api/messages/96/stream after 89.2 s: ReadTimeout(...)"."""


@contextlib.asynccontextmanager
async def _step(kind: str, n: int, what: str, started: float):
    try:
        yield
    except httpx.HTTPError as exc:
        raise ClientFailed(f"{kind} {n}, {what} after {time.monotonic() - started:.1f} s: {exc!r}") from exc


async def _web_client(http: httpx.AsyncClient, statuses: Counter, n: int) -> None:
    started = time.monotonic()
    async with _step("web", n, "sending", started):
        response = await _retrying(
            lambda: http.post("/chat/api/send", json={"content": f"Question number {n}?"}), statuses, attempts=3
        )
    if response.status_code != 201:
        return
    stream_url = response.json()["assistant_message"]["stream_url"]
    for _ in range(30):
        async with _step("web", n, f"following {stream_url}", started), http.stream("GET", stream_url) as sse:
            statuses[sse.status_code] += 1
            if sse.status_code in (429, 503):
                await asyncio.sleep(min(float(sse.headers["Retry-After"]), 2))
                continue
            assert sse.status_code == 200
            async for line in sse.aiter_lines():
                if line == "event: done":
                    return
    raise ClientFailed(f"web {n} never saw its answer end")


async def _api_client(http: httpx.AsyncClient, key: str, statuses: Counter, n: int) -> bool:
    body = {
        "model": "sim-small",
        "messages": [{"role": "user", "content": f"Question number {n}?"}],
        "max_tokens": 32,
        "stream": True,
    }
    started = time.monotonic()
    async with (
        _step("api", n, "streaming a completion", started),
        http.stream("POST", "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}) as response,
    ):
        statuses[response.status_code] += 1
        if response.status_code != 200:
            assert response.status_code in (429, 503) and response.headers.get("Retry-After")
            return False
        lines = [line async for line in response.aiter_lines() if line.startswith("data:")]
        assert lines[-1] == "data: [DONE]", lines[-3:]
        assert not any('"error"' in line for line in lines), lines
        return True


def test_300_concurrent_streams_get_answers_or_503_never_500_and_lose_nothing(small_stack):
    _engine, server = small_stack
    users, keys = [], []
    for n in range(USERS):
        user = make_user(f"load{n}@example.com")
        put_on_plan(
            user, "pro", requests_per_minute=10_000, answers_at_once=10_000
        )  # the server's limits, not the plan's
        users.append(user)
        keys.append(create_api_key(user, "load")[1])
    cookies = [browser_cookies(user) for user in users]
    statuses: Counter = Counter()

    async def scenario():
        limits = httpx.Limits(max_connections=STREAMS + 50, max_keepalive_connections=STREAMS)
        clients = [
            httpx.AsyncClient(
                base_url=server.base_url,
                cookies=cookie,
                limits=limits,
                timeout=60,
                headers=csrf_headers(server),
            )
            for cookie in cookies
        ]
        try:
            tasks = []
            for n in range(STREAMS):
                http = clients[n % USERS]
                if n % 3 == 0:
                    tasks.append(_api_client(http, keys[n % USERS], statuses, n))
                else:
                    tasks.append(_web_client(http, statuses, n))
            return await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for http in clients:
                await http.aclose()

    results = asyncio.run(scenario())

    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, "\n".join(str(failure) for failure in failures)
    assert statuses[500] == 0, statuses
    assert set(statuses) <= {200, 201, 429, 503}, statuses
    assert statuses[201] > 0 and statuses[200] > 0, statuses

    wait_until(
        lambda: not Message.objects.filter(status__in=Message.ACTIVE_STATUSES).exists(),
        timeout=120,
        what="every accepted answer to reach a final state",
    )
    questions = Message.objects.filter(role="user")
    answers = Message.objects.filter(role="assistant")
    assert questions.count() == answers.count() == statuses[201]
    assert not answers.exclude(status__in=["completed", "stopped"]).exists(), Counter(
        answers.values_list("status", flat=True)
    )
    ledger = Counter(UsageRecord.objects.filter(conversation_id__isnull=False).values_list("generation_id", flat=True))
    assert ledger == Counter(str(pk) for pk in answers.values_list("pk", flat=True))
    answered_by_api = sum(1 for r in results if r is True)
    assert UsageRecord.objects.filter(api_key_id__isnull=False).count() == answered_by_api  # each billed once

"""Abuse: one user hammering send over every transport at once, and the plan's limits hold exactly.

A live Daphne on loopback, in front of a simulated worker whose answers are long (1,000 tokens, 0.2 s a
token), so nothing a burst starts ends during the burst and the figures cannot move under the test.
Each burst is bounded: a fixed number of requests, sent together from one event loop — sends on the
web (`POST /chat/api/send`, what the page does before following the answer over SSE), sends over
several WebSockets, and streamed completions on the API — and every answer is stopped afterwards.

What is counted against the plan's numbers:
- the rate limit: the web and the WebSocket share the user's window (scope `chat`), the API has the
  user's API window (scope `api`), shared by all their keys; each admits exactly `requests_per_minute`,
  whatever the mix of transports and keys;
- the monthly quota, shared by every transport: the tokens held never exceed the allowance, and a
  request is refused only when it did not fit in what was left.
Every refusal is a 429 with a Retry-After and a sentence naming the limit.

- answers at once: however they are sent, one user has at most the plan's `answers_at_once` being
  written; one more is refused until one ends (each test of another rule lifts this one).

Other users' time to first token under this load is a timing, which no test here asserts (machines
are noisy): the benchmark's abuse phase measures it (`bench/abuse.py`, docs/PERFORMANCE.md).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field

import httpx
import pytest
import websockets

from accounts.api_keys import create_api_key
from billing import selectors
from billing.models import UsageRecord
from billing.quota_store import get_store
from chat.models import Message
from harness.engines import start_simulator
from tests.conftest import make_user
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne
from tests.support.sessions import browser_cookies, cookie_header, csrf_headers
from tests.support.waiting import wait_until

ANSWER_TOKENS = "1000"


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker):
    engine = start_simulator(
        "--accept-any-model",
        "--decode-step-time",
        "0.2",
        "--min-answer-tokens",
        ANSWER_TOKENS,
        "--max-answer-tokens",
        ANSWER_TOKENS,
    )
    server = start_daphne(
        engine_url=engine.url,
        # The subject is the plan's limits: a request that waits for a database connection on a busy
        # machine waits (the pool's own refusal is tests/test_overload.py's subject), not a 503.
        extra_env={"CHAT_HEARTBEAT_TTL_SECONDS": "2", "DATABASE_POOL_TIMEOUT_SECONDS": "30"},
    )
    yield server
    server.stop()
    engine.stop()


@dataclass
class Outcome:
    transport: str  # "web", "websocket" or "api"
    status: int
    code: str | None = None
    message: str = ""
    retry_after: int | None = None
    message_id: int | None = None  # the answer started (web and WebSocket)


@dataclass
class Burst:
    outcomes: list[Outcome] = field(default_factory=list)

    def of(self, *transports: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.transport in transports]

    @staticmethod
    def accepted(outcomes: list[Outcome]) -> list[Outcome]:
        return [o for o in outcomes if o.status in (200, 201)]

    @staticmethod
    def refused(outcomes: list[Outcome]) -> list[Outcome]:
        return [o for o in outcomes if o.status not in (200, 201)]


async def _burst(
    server, cookies: dict, api_keys: list[str], *, web: int, sockets: int, per_socket: int, api: int, hold
) -> Burst:
    """Send everything at once; `hold(burst)` runs while every accepted request is still open."""
    burst = Burst()
    go = asyncio.Event()
    finished = asyncio.Event()
    connected: list[int] = []
    headers = csrf_headers(server)

    async def web_send(http: httpx.AsyncClient, n: int) -> None:
        await go.wait()
        response = await http.post("/chat/api/send", json={"content": f"Web question {n}?"})
        body = response.json()
        if response.status_code == 201:
            burst.outcomes.append(Outcome("web", 201, message_id=body["assistant_message"]["id"]))
        else:
            header = response.headers.get("Retry-After")
            burst.outcomes.append(
                Outcome(
                    "web",
                    response.status_code,
                    body["error"]["code"],
                    body["error"]["message"],
                    int(header) if header else None,
                )
            )

    async def socket_sends(n: int) -> None:
        ws_headers = {"Cookie": cookie_header(cookies), "Origin": server.base_url}
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=ws_headers) as ws:
            assert json.loads(await ws.recv())["type"] == "hello"
            connected.append(n)
            await go.wait()
            refs = {f"{n}-{i}" for i in range(per_socket)}
            for ref in sorted(refs):
                await ws.send(json.dumps({"type": "send", "ref": ref, "content": f"Socket question {ref}?"}))
            while refs:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if frame.get("ref") not in refs or frame["type"] not in ("accepted", "error"):
                    continue  # tokens and notices of the answers already started
                refs.discard(frame["ref"])
                if frame["type"] == "accepted":
                    burst.outcomes.append(Outcome("websocket", 201, message_id=frame["assistant_message"]["id"]))
                else:
                    burst.outcomes.append(
                        Outcome("websocket", frame["status"], frame["code"], frame["message"], frame.get("retry_after"))
                    )
            await finished.wait()

    async def api_completion(http: httpx.AsyncClient, n: int) -> None:
        body = {
            "model": "sim-small",
            "messages": [{"role": "user", "content": f"API question {n}?"}],
            "max_tokens": int(ANSWER_TOKENS),
            "stream": True,
        }
        await go.wait()
        async with http.stream(
            "POST",
            "/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {api_keys[n % len(api_keys)]}"},
        ) as response:
            if response.status_code == 200:
                burst.outcomes.append(Outcome("api", 200))
                await finished.wait()  # keep it open (and its quota held) until the burst is looked at
                return
            error = json.loads(await response.aread())["error"]
            header = response.headers.get("Retry-After")
            burst.outcomes.append(
                Outcome("api", response.status_code, error["code"], error["message"], int(header) if header else None)
            )

    async with (
        httpx.AsyncClient(base_url=server.base_url, cookies=cookies, headers=headers, timeout=60) as web_http,
        httpx.AsyncClient(base_url=server.base_url, timeout=60) as api_http,
    ):
        tasks = [asyncio.create_task(web_send(web_http, n)) for n in range(web)]
        tasks += [asyncio.create_task(socket_sends(n)) for n in range(sockets)]
        tasks += [asyncio.create_task(api_completion(api_http, n)) for n in range(api)]
        total = web + sockets * per_socket + api

        async def until(condition, what: str) -> None:
            deadline = asyncio.get_running_loop().time() + 60
            while not condition():
                for task in tasks:
                    if task.done() and task.exception():
                        raise task.exception()
                assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
                await asyncio.sleep(0.02)

        try:
            # Every WebSocket is open before anything is sent, so the burst is one burst.
            await until(lambda: len(connected) == sockets, "the WebSockets to open")
            go.set()
            await until(lambda: len(burst.outcomes) == total, "every request to be answered")
            if hold is not None:
                await asyncio.to_thread(hold, burst)
        finally:
            go.set()
            finished.set()
            await asyncio.gather(*tasks)
    return burst


def _stop_everything(server, user, cookies: dict, burst: Burst) -> None:
    """Stop every answer the burst started, and wait until each is settled: ended, and its quota hold
    turned into its ledger row (or given back, for one stopped before it wrote anything)."""
    with httpx.Client(
        base_url=server.base_url,
        cookies=cookies,
        headers=csrf_headers(server),
    ) as http:
        for outcome in Burst.accepted(burst.outcomes):
            if outcome.message_id is not None:
                http.post(f"/chat/api/messages/{outcome.message_id}/stop")
    wait_until(
        lambda: not Message.objects.filter(status__in=Message.ACTIVE_STATUSES).exists(), what="every answer to end"
    )
    period = selectors.current_period(user).period
    wait_until(lambda: get_store().snapshot(user.pk, period.key)[1] == 0, what="every answer to be settled")


def _hammerer(**plan_changes):
    """A Plus user (the API needs a paid plan) with the plan's figures changed, and two API keys (the
    API burst alternates between them)."""
    user = make_user("hammer@example.com")
    put_on_plan(user, "plus", **plan_changes)
    keys = [create_api_key(user, name)[1] for name in ("hammer", "hammer too")]
    return user, browser_cookies(user), keys


def test_the_rate_limit_admits_exactly_the_plans_number_per_window_whatever_the_transport(transactional_db, stack):
    rate = 5
    user, cookies, keys = _hammerer(requests_per_minute=rate, answers_at_once=1000)
    burst = asyncio.run(_burst(stack, cookies, keys, web=3 * rate, sockets=3, per_socket=rate, api=3 * rate, hold=None))

    try:
        # The web page and the WebSocket share the user's window; the API, both keys together, has the
        # user's API window.
        assert len(Burst.accepted(burst.of("web", "websocket"))) == rate, burst.outcomes
        assert len(Burst.accepted(burst.of("api"))) == rate, burst.outcomes
        refused = Burst.refused(burst.outcomes)
        assert len(refused) == len(burst.outcomes) - 2 * rate
        for outcome in refused:
            assert (outcome.status, outcome.code) == (429, "rate_limited"), outcome
            assert outcome.retry_after is not None and 1 <= outcome.retry_after <= 60, outcome
            assert f"reached the limit of {rate} requests a minute of the Plus plan" in outcome.message, outcome
            assert outcome.message.endswith("."), outcome
        # Nothing refused was half-saved: one user message and one answer per accepted send.
        assert Message.objects.filter(role="user").count() == rate
        assert Message.objects.filter(role="assistant").count() == rate
    finally:
        _stop_everything(stack, user, cookies, burst)


def test_one_user_has_at_most_the_plans_answers_at_once_whatever_the_transport(transactional_db, stack):
    at_once = 3
    user, cookies, keys = _hammerer(requests_per_minute=1000, answers_at_once=at_once)
    burst = asyncio.run(_burst(stack, cookies, keys, web=6, sockets=2, per_socket=3, api=6, hold=None))

    try:
        # Web, WebSocket and API together: exactly the plan's number started, every other one refused.
        accepted, refused = Burst.accepted(burst.outcomes), Burst.refused(burst.outcomes)
        assert len(accepted) == at_once, burst.outcomes
        assert len(refused) == len(burst.outcomes) - at_once
        for outcome in refused:
            assert (outcome.status, outcome.code, outcome.retry_after) == (429, "rate_limited", 3), outcome
            assert outcome.message.startswith(
                f"You already have {at_once} answers being written, the most the Plus plan allows at once."
            ), outcome
        # Nothing refused was half-saved.
        assert Message.objects.filter(role="user").count() == len(Burst.accepted(burst.of("web", "websocket")))
        assert Message.objects.filter(role="assistant").count() == len(Burst.accepted(burst.of("web", "websocket")))
    finally:
        _stop_everything(stack, user, cookies, burst)


QUOTA_FIGURES = re.compile(r"may use up to ([\d,]+) tokens, but only ([\d,]+) of the ([\d,]+) tokens")


def test_the_quota_is_never_overspent_and_refuses_only_what_does_not_fit(transactional_db, stack):
    allowance = 5_500  # room for about five answers of 1,000 tokens (plus their prompts)
    user, cookies, keys = _hammerer(
        requests_per_minute=1000, answers_at_once=1000, max_output_tokens=int(ANSWER_TOKENS), tokens_per_month=allowance
    )
    period = selectors.current_period(user).period
    held_during_burst: list[int] = []

    def look(burst: Burst) -> None:
        used, held = get_store().snapshot(user.pk, period.key)
        held_during_burst.append(held)
        assert used in (None, 0), "nothing was settled during the burst"

    burst = asyncio.run(_burst(stack, cookies, keys, web=6, sockets=2, per_socket=3, api=6, hold=look))
    try:
        accepted, refused = Burst.accepted(burst.outcomes), Burst.refused(burst.outcomes)
        [held] = held_during_burst
        # Never more held than the allowance, by every transport together.
        assert 0 < held <= allowance
        assert accepted and refused
        needs = []
        for outcome in refused:
            assert (outcome.status, outcome.code) == (429, "quota_exceeded"), outcome
            assert outcome.retry_after is not None and outcome.retry_after >= 1, outcome
            figures = QUOTA_FIGURES.search(outcome.message)
            assert figures, outcome.message
            needed, left, total = (int(group.replace(",", "")) for group in figures.groups())
            assert total == allowance
            assert needed > left, f"refused although it fitted: {outcome}"  # refused only when it did not fit
            needs.append(needed)
        # And none was refused that would have fitted in what was left at the end.
        assert allowance - held < min(needs)
    finally:
        _stop_everything(stack, user, cookies, burst)

    # One ledger row per answer started that wrote anything (one stopped before its first token is
    # billed nothing; every accepted API call had its first token before its 200), and the counter
    # equal to the ledger, within the allowance.
    answers = Message.objects.filter(conversation__owner=user, role="assistant")
    assert answers.count() == len(Burst.accepted(burst.of("web", "websocket")))
    billed = UsageRecord.objects.filter(user=user)
    assert billed.filter(api_key_id__isnull=True).count() == answers.filter(completion_tokens__gt=0).count()
    assert billed.filter(api_key_id__isnull=False).count() == len(Burst.accepted(burst.of("api")))
    ledger = selectors.ledger_total(user.pk, period)
    wait_until(lambda: get_store().snapshot(user.pk, period.key) == (ledger, 0), what="the counter to equal the ledger")
    assert ledger <= allowance

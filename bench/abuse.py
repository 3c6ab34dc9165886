"""The abuse phase of `make bench`: one user hammering send over every transport at once, and what
everyone else's time to first token does meanwhile.

Two windows of the same length against one Daphne process and the engine at `realistic` speed, with
the product's own admission limits:

1. unloaded: ``others`` users (a plan with its limits out of the way) each send a message and read
   the answer over SSE, one after another, for the window;
2. loaded: the same, while one user on the Plus plan (its real limits: 60 requests a minute, 4
   answers at once, the quota) sends as fast as it can over the web (`POST /chat/api/send`, not waiting for answers), over
   WebSockets and over the API (streamed; each accepted answer is read to its end meanwhile): on each
   loop the next request leaves as soon as the last is accepted or refused, never after a Retry-After.

What it reports: the others' TTFT p50 / p99 in each window and the ratio of the p99s (the target is
at most 2x), and the abuser's requests accepted and refused per transport against the plan's numbers
(exactly 60 in the user's web window, page and WebSocket together, and 60 in the user's API window,
all their keys together, in a window shorter than a minute), with every refusal's status and whether
it carried Retry-After.

Bounded: loopback only, each window `seconds` long (15 with --quick, 30 otherwise), the abuser's
loops capped at ``ABUSER_MAX_REQUESTS`` requests in all. The exact-limits half is also a test
(tests/security/test_abuse.py); the timing half is here because tests assert no timings.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable

import httpx
import websockets

from bench import load, report
from bench.load import Account, Sample

#: What the refusal for the plan's answers at once says (billing.services.quota), beside the per-minute one.
AT_ONCE_SENTENCE = "answers being written"
ABUSER_PLAN = "plus"
ABUSER_LOOPS = {"web": 8, "ws": 4, "api": 8}
ABUSER_MAX_REQUESTS = 20_000
OTHERS = 6
ANSWER_TOKENS = 64


async def _others(url: str, others: list[Account], seconds: float, timeout: float) -> list[Sample]:
    """Each of ``others`` sends and reads one answer at a time, for ``seconds``."""
    samples: list[Sample] = []
    numbers = itertools.count()
    deadline = time.perf_counter() + seconds
    async with load.http_client(timeout) as client:

        async def person(account: Account) -> None:
            while time.perf_counter() < deadline:
                try:
                    sample = await asyncio.wait_for(load.web_turn(client, url, account, next(numbers)), timeout)
                except TimeoutError:
                    sample = Sample("timeout", time.perf_counter(), timeout)
                samples.append(sample)

        await asyncio.gather(*(person(a) for a in others))
    return samples


class Tally:
    """The abuser's requests: accepted and refused per transport, and each refusal's status."""

    def __init__(self) -> None:
        self.accepted: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.without_retry_after = 0
        self.examples: dict[str, str] = {}
        self.at_once = 0
        self.count = 0

    def add(self, transport: str, status: str, retry_after, detail: str = "") -> None:
        if status in ("200", "201", "ok"):
            self.accepted[transport] += 1
            return
        self.refused[transport] += 1
        self.statuses[f"{transport} {status}"] += 1
        if status in ("429", "503") and not retry_after:
            self.without_retry_after += 1
        sentence = _sentence(detail)
        if AT_ONCE_SENTENCE in sentence:
            self.at_once += 1
            self.examples.setdefault(f"{transport} {status} (answers at once)", sentence)
        else:
            self.examples.setdefault(f"{transport} {status}", sentence)


def _sentence(detail: str) -> str:
    """The refusal's sentence: the message of a JSON error body (web or API), else the text as it is."""
    try:
        error = json.loads(detail)["error"]
        return str(error.get("message", error))[:300]
    except (ValueError, KeyError, TypeError, AttributeError):
        return detail[:300]


async def _abuser(url: str, abuser: Account, seconds: float, timeout: float, tally: Tally) -> None:
    deadline = time.perf_counter() + seconds
    numbers = itertools.count()

    def more() -> bool:
        tally.count += 1
        return time.perf_counter() < deadline and tally.count <= ABUSER_MAX_REQUESTS

    async with load.http_client(timeout) as client:

        async def web() -> None:
            while more():
                try:
                    response = await client.post(
                        f"{url}/chat/api/send",
                        json={"conversation_id": None, "content": load.question(next(numbers))},
                        headers=load.web_headers(abuser, url),
                    )
                except (httpx.HTTPError, OSError) as exc:
                    tally.add("web", "transport", None, f"{type(exc).__name__}: {exc}")
                    continue
                tally.add("web", str(response.status_code), response.headers.get("retry-after"), response.text)

        readers: list[asyncio.Task] = []

        async def api() -> None:
            while more():
                accepted = asyncio.Event()
                reader = asyncio.create_task(api_completion(next(numbers), accepted))
                readers.append(reader)
                # The next request as soon as this one is answered (accepted: its stream is read to the
                # end meanwhile, as the abuser wants the answers) or refused.
                waiter = asyncio.create_task(accepted.wait())
                await asyncio.wait([reader, waiter], return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()  # refused: nothing will set it (left pending, the loop's end would complain)

        async def api_completion(n: int, accepted: asyncio.Event) -> None:
            body = {
                "model": "sim-small",
                "stream": True,
                "max_tokens": ANSWER_TOKENS,
                "messages": [{"role": "user", "content": load.question(n)}],
            }
            headers = {"Authorization": f"Bearer {abuser.api_key}"}
            try:
                async with client.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as response:
                    if response.status_code != 200:
                        text = (await response.aread()).decode(errors="replace")
                        tally.add("api", str(response.status_code), response.headers.get("retry-after"), text)
                        return
                    tally.add("api", "200", None)
                    accepted.set()
                    async for _ in response.aiter_lines():
                        pass
            except (httpx.HTTPError, OSError) as exc:
                tally.add("api", "transport", None, f"{type(exc).__name__}: {exc}")

        async def socket() -> None:
            origin = url
            async with websockets.connect(
                url.replace("http://", "ws://") + "/ws/chat/",
                origin=origin,
                additional_headers={"Cookie": abuser.cookie},
                max_size=2**24,
                ping_interval=None,
            ) as ws:
                await asyncio.wait_for(ws.recv(), timeout)  # hello
                while more():
                    ref = f"a{next(numbers)}"
                    await ws.send(json.dumps({"type": "send", "ref": ref, "content": load.question(0)}))
                    while True:
                        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                        if frame.get("ref") != ref or frame.get("type") not in ("accepted", "error"):
                            continue  # the tokens of answers already accepted
                        if frame["type"] == "accepted":
                            tally.add("ws", "201", None)
                        else:
                            tally.add(
                                "ws", str(frame.get("status")), frame.get("retry_after"), frame.get("message", "")
                            )
                        break

        loops = [web() for _ in range(ABUSER_LOOPS["web"])]
        loops += [api() for _ in range(ABUSER_LOOPS["api"])]
        loops += [socket() for _ in range(ABUSER_LOOPS["ws"])]
        await asyncio.gather(*loops)
        await asyncio.gather(*readers, return_exceptions=True)


async def measure(
    url: str, others: list[Account], abuser: Account, *, seconds: float, timeout: float, pids: dict[str, int]
) -> dict:
    """Both windows; ``pids`` (Daphne's, the engine's) are sampled for their CPU time in each."""
    from bench import procs

    def cpu() -> dict[str, float]:
        return {name: procs.cpu_seconds(pid) for name, pid in pids.items()}

    before = cpu()
    unloaded = await _others(url, others, seconds, timeout)
    between = cpu()
    tally = Tally()
    loaded_task = asyncio.create_task(_others(url, others, seconds, timeout))
    await _abuser(url, abuser, seconds, timeout, tally)
    loaded = await loaded_task
    after = cpu()
    busy = {
        window: {name: round((end[name] - start[name]) / seconds * 100) for name in pids}
        for window, start, end in (("unloaded", before, between), ("loaded", between, after))
    }
    return {
        "cpu_pct": busy,
        "unloaded": report.summarize(unloaded, seconds),
        "loaded": report.summarize(loaded, seconds),
        "abuser": {
            "requests": sum(tally.accepted.values()) + sum(tally.refused.values()),
            "accepted": dict(tally.accepted),
            "refused": dict(tally.refused),
            "refusal_statuses": dict(tally.statuses),
            "refusals_without_retry_after": tally.without_retry_after,
            "at_once_refusals": tally.at_once,
            "examples": tally.examples,
        },
    }


def run_phase(*, start: Callable, stop: Callable, product_env: Callable, others: list[Account], quick: bool) -> dict:
    """The phase as `bench/run.py` runs it: its own engine and Daphne, the abuser created on Plus."""
    from bench import data, procs
    from billing.models import Plan

    seconds = 15 if quick else 30
    result: dict = {"seconds": seconds, "others": len(others), "plan": ABUSER_PLAN, "loops": ABUSER_LOOPS}
    engine = daphne = None
    try:
        [abuser] = data.create_accounts("abuser", 1, ABUSER_PLAN)
        plan = Plan.objects.get(slug=ABUSER_PLAN)
        result["plan_limits"] = {
            "requests_per_minute": plan.requests_per_minute,
            "tokens_per_month": plan.tokens_per_month,
            "answers_at_once": plan.answers_at_once,
        }
        engine = start(procs.start_engine("realistic", ANSWER_TOKENS, "--max-running-requests", "256"))
        daphne = start(procs.start_daphne(product_env(engine.url, admission_raised=False), "abuse"))
        result["engine"] = f"--speed realistic, {ANSWER_TOKENS}-token answers, --max-running-requests 256"
        result["admission"] = data.admission_limits()
        pids = {"daphne": daphne.proc.pid, "engine": engine.proc.pid}
        result |= asyncio.run(measure(daphne.url, others, abuser, seconds=seconds, timeout=30.0, pids=pids))
        data.wait_drained(60)
    finally:
        stop(daphne)
        stop(engine)
    return result

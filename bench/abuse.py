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
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import websockets

from bench import load, report
from bench.load import Account, Sample

if TYPE_CHECKING:
    from bench.run import Bench

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


def run(bench: Bench) -> None:
    """The phase as `bench/run.py` runs it: its figures, or the error that stopped it, and its text."""
    try:
        result = measure_phase(bench, others=bench.accounts["premium"][-OTHERS:])
    except Exception as exc:
        result = {"error": bench.failure(exc)}
    bench.results["phases"]["abuse"] = result
    bench.log(text(result))


def measure_phase(bench: Bench, *, others: list[Account]) -> dict:
    """Its own engine and Daphne, the abuser created on Plus, then both windows."""
    from bench import data, procs
    from billing.models import Plan

    quick = bench.args.quick
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
        engine = bench.start(procs.start_engine("realistic", ANSWER_TOKENS, "--max-running-requests", "256"))
        daphne = bench.start(procs.start_daphne(bench.product_env(engine.url, admission_raised=False), "abuse"))
        result["engine"] = f"--speed realistic, {ANSWER_TOKENS}-token answers, --max-running-requests 256"
        result["admission"] = data.admission_limits()
        pids = {"daphne": daphne.proc.pid, "engine": engine.proc.pid}
        result |= asyncio.run(measure(daphne.url, others, abuser, seconds=seconds, timeout=30.0, pids=pids))
        data.wait_drained(60)
    finally:
        bench.stop(daphne)
        bench.stop(engine)
    return result


# -- its target, console text and part of the doc -------------------------------------------------


def p99_ratio(result: dict) -> float | None:
    """Others' TTFT p99 with the abuser over without: what the abuse target is about."""
    before = ((result.get("unloaded") or {}).get("ttft_ms") or {}).get("p99")
    during = ((result.get("loaded") or {}).get("ttft_ms") or {}).get("p99")
    if not before or during is None:
        return None
    return round(during / before, 2)


def limits_kept(result: dict) -> dict | None:
    """The abuser's accepted requests against the plan's per-minute number, per window (the user's web
    window, page and WebSocket together, and the user's API window, all keys together); exact only
    within the first minute."""
    abuser, limits = result.get("abuser"), result.get("plan_limits")
    if not abuser or not limits:
        return None
    accepted = abuser.get("accepted") or {}
    rate = limits["requests_per_minute"]
    web = accepted.get("web", 0) + accepted.get("ws", 0)
    api = accepted.get("api", 0)
    refused = abuser.get("refusal_statuses") or {}
    only_429 = all(status.endswith(" 429") for status in refused)
    return {
        "rate": rate,
        "web_and_ws": web,
        "api": api,
        "within": web <= rate and api <= rate and result.get("seconds", 60) < 60,
        "exact": web == rate and api == rate and result.get("seconds", 60) < 60,
        "busy_refusals": sum(n for status, n in refused.items() if status.endswith(" 503")),
        "at_once_refusals": abuser.get("at_once_refusals", 0),
        "at_once": limits.get("answers_at_once"),
        "refusals_all_429_with_retry_after": only_429 and not abuser.get("refusals_without_retry_after"),
    }


def target(result: dict) -> dict:
    ratio = p99_ratio(result)
    if ratio is None:
        why = result.get("error") or result.get("skipped") or "not run"
        return report.target("others' TTFT p99 while one user hammers every transport", "not measured", "", None, why)
    before, during = result["unloaded"]["ttft_ms"]["p99"], result["loaded"]["ttft_ms"]["p99"]
    return report.target(
        "others' TTFT p99 while one user hammers every transport, vs without",
        f"{during:.0f} vs {before:.0f} ms ({ratio:.2f}x)",
        "<= 2x",
        ratio <= 2,
    )


def text(result: dict) -> str:
    if "loaded" not in result:
        return f"\nAbuse: failed: {result.get('error') or result.get('skipped')}"
    limits = limits_kept(result) or {}
    lines = [f"\nAbuse: one {result['plan']} user on every transport for {result['seconds']} s"]
    for window in ("unloaded", "loaded"):
        row = result[window]
        t = row.get("ttft_ms") or {}
        lines.append(
            f"  others {window:<8} {row['ok']}/{row['requests']} answered, TTFT p50 {t.get('p50')} p99 "
            f"{t.get('p99')} ms, errors {row.get('errors')}; CPU {(result.get('cpu_pct') or {}).get(window)}"
        )
    a = result["abuser"]
    lines.append(
        f"  abuser: {a['requests']} requests, accepted {a['accepted']}, refused {a['refused']} "
        f"({a['refusal_statuses']}); {a['refusals_without_retry_after']} refusals without Retry-After"
    )
    lines.append(
        f"  limits: {limits.get('web_and_ws')} accepted in the user's window and {limits.get('api')} "
        f"in the user's API window, "
        f"plan {limits.get('rate')} a minute: {'exact' if limits.get('exact') else 'NOT exact'}"
        f"{'' if limits.get('within') else ', EXCEEDED'}; "
        f"p99 ratio {p99_ratio(result)}x (target <= 2x)"
    )
    return "\n".join(lines)


def markdown(results: dict, rel: dict[str, Path]) -> list[str]:
    a = results["phases"].get("abuse") or {}
    out = ["", "## Abuse: one user hammering every transport at once", ""]
    if "loaded" not in a:
        return [*out, f"Not measured: {a.get('skipped') or a.get('error') or 'not run'}."]
    run = a.get("run") or {}
    if run:
        out += [
            f"Measured on its own (`bench/run.py --phases abuse --sections-only{' --quick' if run.get('quick') else ''}`) "
            f"on {datetime.fromisoformat(run['started']):%Y-%m-%d %H:%M} UTC at commit {run.get('commit', '?')}, load "
            f"average {run.get('loadavg')} at its end"
            + (f" ({run['note'].rstrip('.')})" if run.get("note") else "")
            + "; the rest of this page is from the run named at the top.",
            "",
        ]
    loops = a.get("loops") or {}
    limits = limits_kept(a) or {}
    ratio = p99_ratio(a)
    out += [
        f"Two windows of {a['seconds']} s against one Daphne process, the engine at `realistic` speed "
        f"({a.get('engine')}) and the product's admission limits (soft {a['admission']['soft']}, hard "
        f"{a['admission']['hard']}). In both, {a['others']} other users each send a message and read the answer "
        "over SSE, one after another. In the second, one user on the "
        f"{a['plan'].title()} plan ({a['plan_limits']['requests_per_minute']} requests a minute, "
        f"{a['plan_limits']['tokens_per_month']:,} tokens a month"
        + (
            f", {a['plan_limits']['answers_at_once']} answers at once"
            if a["plan_limits"].get("answers_at_once")
            else ""
        )
        + ") also sends as fast as it can: "
        f"{loops.get('web')} loops of `POST /chat/api/send` (not waiting for answers), {loops.get('ws')} WebSockets "
        f"and {loops.get('api')} loops of streamed API completions (each accepted answer read to its end "
        "meanwhile); on each loop the next request leaves as soon as the last is accepted or refused, never after "
        "a Retry-After. Loopback only; the exact limits are also asserted by "
        "`tests/security/test_abuse.py`.",
        "",
        "| others | answered / sent | TTFT p50 / p99 (ms) | errors | Daphne CPU | engine CPU |",
        "|---|---|---|---|---|---|",
    ]
    for window, label in (("unloaded", "alone"), ("loaded", "beside the abuser")):
        row = a[window]
        t = row.get("ttft_ms") or {}
        busy = (a.get("cpu_pct") or {}).get(window) or {}
        out.append(
            f"| {label} | {row['ok']} / {row['requests']} | {t.get('p50', '-')} / {t.get('p99', '-')} | "
            f"{report.errors(row.get('errors') or {}) or 0} | {busy.get('daphne', '-')}% | {busy.get('engine', '-')}% |"
        )
    abuser = a["abuser"]
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted((abuser.get("refusal_statuses") or {}).items()))
    verdict = {True: "**met**", False: "**missed**", None: "not measured"}[None if ratio is None else ratio <= 2]
    out += [
        "",
        f"Others' p99 TTFT beside the abuser is {ratio}x what it is alone: target at most 2x, {verdict}.",
        "",
        f"The abuser sent {abuser['requests']:,} requests: accepted {abuser.get('accepted')}, refused "
        f"{abuser.get('refused')} ({statuses}; {abuser['refusals_without_retry_after']} without Retry-After). "
        f"Accepted in the user's window (page and WebSocket together): {limits.get('web_and_ws')}; "
        "in the user's API window (all keys): "
        f"{limits.get('api')}; the plan's number: {limits.get('rate')} a minute, so "
        + _limits_verdict(limits)
        + " What the refusals said (one each):",
        "",
    ]
    out += [f"- `{kind}`: {text.replace('|', '/')}" for kind, text in sorted((abuser.get("examples") or {}).items())]
    return out


def _limits_verdict(limits: dict) -> str:
    if limits.get("exact"):
        return "**exactly the plan's limits**."
    if not limits.get("within"):
        return "**more than the plan allows**."
    if limits.get("at_once_refusals"):
        return (
            f"never more than the plan's limits: {limits['at_once_refusals']} of the requests within the per-minute "
            f"number were refused because the user already had the plan's {limits.get('at_once')} answers being "
            "written at once (429), so fewer than that number were accepted."
        )
    if limits.get("busy_refusals"):
        return (
            f"never more than the plan's limits, but not exactly them: {limits['busy_refusals']} requests were "
            "refused first as busy (503, the product's overload protection), so fewer reached the limit."
        )
    return "never more than the plan's limits, but fewer were sent than it allows."

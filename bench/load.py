"""Load generators, measured from the client's side: one stream is "request sent -> first token -> end".

Three ways in: any OpenAI-compatible ``/v1/chat/completions`` (the engine itself, smg, LiteLLM and
the product's API), the chat page's path (``POST /chat/api/send`` then the answer's SSE stream), and
the chat WebSocket (a ``send`` frame, then ``delta`` frames). A failure is a sample with a status
(the HTTP status, or ``timeout`` / ``transport`` / ``incomplete``), never an exception.

Nothing here imports Django.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http.cookiejar import CookieJar

import httpx
import websockets
from websockets.asyncio.client import connect as ws_connect

QUESTIONS = [
    "How do queues and caches work together in a busy harbour office?",
    "Explain, briefly, why a prefix cache shortens the time to the first token.",
    "What should a ferry captain check before leaving port in fog?",
    "Write a few sentences about tides, berths and pilots.",
]


@dataclass
class Account:
    """A benchmark user: a signed-in session (cookie + CSRF token) and an API key."""

    user_id: int
    email: str
    priority: str
    api_key: str
    csrf: str
    cookie: str


@dataclass
class Sample:
    status: str  # "ok", an HTTP status ("503"), "timeout", "transport", "incomplete", "ws_<code>"
    started: float  # perf_counter when the request was sent
    latency: float  # seconds to the first token (ok) or to the refusal / failure
    total: float = 0.0  # seconds to the end of the answer
    tokens: int = 0
    retry_after: str | None = None
    detail: str = ""
    kind: str = ""  # e.g. "free" / "premium" in the overload phase

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class NoCookies(CookieJar):
    """A jar that keeps nothing: each request carries its own user's Cookie header, never another's."""

    def set_cookie(self, cookie) -> None:
        return None

    def extract_cookies(self, response, request) -> None:
        return None


def http_client(timeout: float, *, idle_kept: int | None = None) -> httpx.AsyncClient:
    """The bench's client. `idle_kept` bounds the idle connections it keeps for reuse: an open loop
    (requests arriving whatever happened to earlier ones) should pass a number, since httpcore looks at
    every pooled connection, idle ones with a system call each, whenever a request starts or ends, and
    hundreds kept idle made the client, not the product, the bottleneck of the overload phase."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=idle_kept, keepalive_expiry=30),
        cookies=NoCookies(),
        trust_env=False,
    )


def question(n: int) -> str:
    return f"{QUESTIONS[n % len(QUESTIONS)]} (#{n})"


def _short(text: str, limit: int = 160) -> str:
    """A refusal's text for the report: an HTML error page is cut down to its words."""
    if text.lstrip()[:15].lower().startswith(("<!doctype", "<html")):
        text = re.sub(r"<(script|style)\b.*?</\1>", " ", text, flags=re.S | re.I)
        text = "HTML page: " + re.sub(r"<[^>]+>", " ", text)
    text = " ".join(text.split())
    return text[:limit]


async def _refused(response: httpx.Response, started: float, kind: str = "") -> Sample:
    """The sample of a request answered with a status other than the one expected (its body read)."""
    text = (await response.aread()).decode(errors="replace")
    return Sample(
        kind or str(response.status_code),
        started,
        time.perf_counter() - started,
        retry_after=response.headers.get("retry-after"),
        detail=_short(text),
    )


# -- OpenAI-compatible streaming ------------------------------------------------------------------


async def openai_stream(
    client: httpx.AsyncClient, base_url: str, n: int, *, model: str, max_tokens: int, api_key: str = ""
) -> Sample:
    """One streamed chat completion; time to the first non-empty content delta."""
    body = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        "temperature": 0,
        "messages": [{"role": "user", "content": question(n)}],
    }
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    started = time.perf_counter()
    first = None
    chunks = 0
    usage = None
    try:
        async with client.stream("POST", f"{base_url}/v1/chat/completions", json=body, headers=headers) as response:
            if response.status_code != 200:
                return await _refused(response, started)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    end = time.perf_counter()
                    if first is None:
                        return Sample("incomplete", started, end - started, detail="no content before [DONE]")
                    return Sample("ok", started, first - started, end - started, usage or chunks)
                if first is None or '"usage"' in data or '"error"' in data:
                    chunk = json.loads(data)
                    if chunk.get("error"):
                        return Sample(
                            "stream_error",
                            started,
                            time.perf_counter() - started,
                            detail=_short(json.dumps(chunk["error"])),
                        )
                    if chunk.get("usage"):
                        usage = chunk["usage"].get("completion_tokens") or usage
                    if first is None and any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
                        first = time.perf_counter()
                if '"content"' in data:
                    chunks += 1
    except httpx.TimeoutException as exc:
        return Sample("timeout", started, time.perf_counter() - started, detail=type(exc).__name__)
    except (httpx.HTTPError, OSError) as exc:
        return Sample(
            "transport", started, time.perf_counter() - started, detail=_short(f"{type(exc).__name__}: {exc}")
        )
    return Sample("incomplete", started, time.perf_counter() - started, detail="stream ended without [DONE]")


# -- the chat page: send, then the answer's SSE stream -----------------------------------------------


def web_headers(account: Account, base_url: str) -> dict[str, str]:
    return {"Cookie": account.cookie, "X-CSRFToken": account.csrf, "Origin": base_url, "Referer": f"{base_url}/"}


async def web_send(
    client: httpx.AsyncClient, base_url: str, account: Account, content: str
) -> tuple[Sample | None, dict]:
    """``POST /chat/api/send``; (a failure sample, {}) or (None, the turn's JSON)."""
    started = time.perf_counter()
    try:
        response = await client.post(
            f"{base_url}/chat/api/send",
            json={"conversation_id": None, "content": content},
            headers=web_headers(account, base_url),
        )
    except httpx.TimeoutException as exc:
        return Sample("timeout", started, time.perf_counter() - started, detail=f"send: {type(exc).__name__}"), {}
    except (httpx.HTTPError, OSError) as exc:
        return Sample(
            "transport", started, time.perf_counter() - started, detail=_short(f"{type(exc).__name__}: {exc}")
        ), {}
    if response.status_code != 201:
        return await _refused(response, started), {}
    return None, response.json()


async def _answer_events(lines: AsyncIterator[str], started: float) -> Sample:
    """Read an answer's SSE frames from a response's `lines` to its ``done``; TTFT counted from ``started``."""
    first = None
    event = ""
    async for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            if event == "delta":
                if first is None:
                    first = time.perf_counter()
            elif event == "done":
                end = time.perf_counter()
                message = json.loads(line[5:]).get("message") or {}
                if message.get("status") != "completed":
                    return Sample(
                        f"answer_{message.get('status')}",
                        started,
                        end - started,
                        detail=_short(message.get("error") or ""),
                    )
                if first is None:
                    return Sample("incomplete", started, end - started, detail="done without a delta")
                return Sample("ok", started, first - started, end - started, int(message.get("completion_tokens") or 0))
            elif event == "error":
                return Sample("sse_error", started, time.perf_counter() - started, detail=_short(line[5:]))
    return Sample("incomplete", started, time.perf_counter() - started, detail="stream ended without done")


async def sse_follow(
    client: httpx.AsyncClient, base_url: str, account: Account, stream_url: str, started: float
) -> Sample:
    """Read one answer's SSE stream (its GET, as another tab does) to its ``done``; TTFT counted from ``started``."""
    try:
        async with client.stream("GET", f"{base_url}{stream_url}", headers={"Cookie": account.cookie}) as response:
            if response.status_code != 200:
                return await _refused(response, started, f"sse_{response.status_code}")
            return await _answer_events(response.aiter_lines(), started)
    except httpx.TimeoutException as exc:
        return Sample("timeout", started, time.perf_counter() - started, detail=f"stream: {type(exc).__name__}")
    except (httpx.HTTPError, OSError) as exc:
        return Sample(
            "transport", started, time.perf_counter() - started, detail=_short(f"stream: {type(exc).__name__}: {exc}")
        )


async def web_turn(
    client: httpx.AsyncClient, base_url: str, account: Account, n: int, accepted: list[dict] | None = None
) -> Sample:
    """What the chat page does: send, the send's response being the answer's SSE stream (its first
    event the turn).

    Each send the product accepts is added to ``accepted`` at once, so it is checked afterwards
    even if reading its answer then fails or times out.
    """
    content = question(n)
    started = time.perf_counter()
    headers = {**web_headers(account, base_url), "Accept": "text/event-stream, application/json"}
    body = {"conversation_id": None, "content": content}
    try:
        async with client.stream("POST", f"{base_url}/chat/api/send", json=body, headers=headers) as response:
            if response.status_code != 201:
                return await _refused(response, started)
            lines = response.aiter_lines()
            turn = None
            async for line in lines:
                if line.startswith("data:"):
                    turn = json.loads(line[5:])
                    break
            if turn is None:
                return Sample("incomplete", started, time.perf_counter() - started, detail="no turn event")
            if accepted is not None:
                accepted.append(
                    {
                        "user_message_id": turn["user_message"]["id"],
                        "content": content,
                        "assistant_message_id": turn["assistant_message"]["id"],
                        "conversation_id": turn["conversation"]["id"],
                    }
                )
            return await _answer_events(lines, started)
    except httpx.TimeoutException as exc:
        return Sample("timeout", started, time.perf_counter() - started, detail=f"send: {type(exc).__name__}")
    except (httpx.HTTPError, OSError) as exc:
        return Sample(
            "transport", started, time.perf_counter() - started, detail=_short(f"{type(exc).__name__}: {exc}")
        )


# -- the chat WebSocket ------------------------------------------------------------------------------


class ChatSocket:
    """One open ``/ws/chat/`` connection of one user; one send in flight at a time."""

    def __init__(self, base_url: str, account: Account) -> None:
        self.url = base_url.replace("http://", "ws://") + "/ws/chat/"
        self.origin = base_url
        self.account = account
        self.ws = None
        self.refs = itertools.count(1)
        self.stage = "idle"  # how far the current send got: sent, accepted, streaming

    async def open(self, timeout: float) -> None:
        self.ws = await asyncio.wait_for(
            ws_connect(
                self.url,
                origin=self.origin,
                additional_headers={"Cookie": self.account.cookie},
                max_size=2**24,
                open_timeout=timeout,
                ping_interval=None,
            ),
            timeout,
        )
        hello = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        if hello.get("type") != "hello":
            raise ConnectionError(f"expected hello, got {hello.get('type')!r}")

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.ws.close(), 5)

    async def turn(self, n: int) -> Sample:
        ref = f"r{next(self.refs)}"
        started = time.perf_counter()
        first = None
        message_id = None
        if self.ws is None:
            return Sample("ws_not_open", started, 0.0)
        try:
            await self.ws.send(
                json.dumps({"type": "send", "ref": ref, "conversation_id": None, "content": question(n)})
            )
            self.stage = "sent, no accepted frame"
            while True:
                frame = json.loads(await self.ws.recv())
                kind = frame.get("type")
                if kind == "error" and frame.get("ref") == ref:
                    retry = frame.get("retry_after")
                    return Sample(
                        str(frame.get("status") or "ws_error"),
                        started,
                        time.perf_counter() - started,
                        retry_after=None if retry is None else str(retry),
                        detail=_short(frame.get("message", "")),
                    )
                if kind == "accepted" and frame.get("ref") == ref:
                    message_id = frame["assistant_message"]["id"]
                    self.stage = "accepted, no delta"
                elif kind == "delta" and message_id is not None and frame.get("message_id") == message_id:
                    if first is None:
                        first = time.perf_counter()
                        self.stage = "streaming, no done"
                elif kind == "done" and message_id is not None and frame.get("message_id") == message_id:
                    end = time.perf_counter()
                    message = frame.get("message") or {}
                    if message.get("status") != "completed":
                        return Sample(
                            f"answer_{message.get('status')}",
                            started,
                            end - started,
                            detail=_short(message.get("error") or ""),
                        )
                    if first is None:
                        return Sample("incomplete", started, end - started, detail="done without a delta")
                    return Sample(
                        "ok", started, first - started, end - started, int(message.get("completion_tokens") or 0)
                    )
        except websockets.ConnectionClosed as exc:
            self.ws = None
            return Sample("ws_closed", started, time.perf_counter() - started, detail=_short(str(exc)))
        except OSError as exc:
            self.ws = None
            return Sample("transport", started, time.perf_counter() - started, detail=_short(str(exc)))


# -- running many ------------------------------------------------------------------------------------


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    wall: float = 0.0
    issued: int = 0
    stopped_by_cap: bool = False


async def closed_loop(
    concurrency: int,
    total: int,
    cap_seconds: float,
    timeout: float,
    one: Callable[[int, int], Awaitable[Sample]],
    describe: Callable[[int], str] | None = None,
) -> Run:
    """``concurrency`` streams kept in flight until ``total`` were sent or ``cap_seconds`` passed.

    ``one(slot, n)`` makes request number ``n`` on stream ``slot``. A request that takes longer than
    ``timeout`` is abandoned and counted as a timeout; ``describe(slot)`` says how far it got.
    """
    run = Run()
    counter = itertools.count()
    started = time.perf_counter()
    deadline = started + cap_seconds
    # Requests still running this long after the level's time is up are cut (and count as timeouts),
    # so a level never takes much more than its time.
    hard_end = deadline + min(10.0, timeout)

    async def worker(slot: int) -> None:
        while time.perf_counter() < deadline:
            n = next(counter)
            if n >= total:
                return
            run.issued += 1
            sent = time.perf_counter()
            limit = min(timeout, max(0.5, hard_end - sent))
            try:
                sample = await asyncio.wait_for(one(slot, n), limit)
            except TimeoutError:
                stage = f" ({describe(slot)})" if describe else ""
                why = f"no end within {timeout:.0f} s" if limit == timeout else "cut at the end of the level"
                sample = Sample("timeout", sent, time.perf_counter() - sent, detail=why + stage)
            run.samples.append(sample)
        run.stopped_by_cap = True

    await asyncio.gather(*(worker(slot) for slot in range(concurrency)))
    run.wall = time.perf_counter() - started
    return run


async def open_loop(
    rate: float,
    count: int,
    timeout: float,
    seed: int,
    one: Callable[[int], Awaitable[Sample]],
    kind: Callable[[int], str] = lambda n: "",
) -> Run:
    """``count`` requests arriving as a Poisson process of ``rate`` per second, whatever the answers.

    ``kind(n)`` labels request ``n`` (e.g. its plan's priority class), timeouts included.
    """
    run = Run()
    rng = random.Random(seed)
    started = time.perf_counter()
    at = 0.0
    tasks = []

    async def fire(n: int) -> None:
        sent = time.perf_counter()
        try:
            sample = await asyncio.wait_for(one(n), timeout)
        except TimeoutError:
            sample = Sample("timeout", sent, time.perf_counter() - sent, detail=f"no end within {timeout:.0f} s")
        sample.kind = kind(n)
        run.samples.append(sample)

    for n in range(count):
        at += rng.expovariate(rate)
        delay = started + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(fire(n)))
        run.issued += 1
    await asyncio.gather(*tasks)
    run.wall = time.perf_counter() - started
    return run


# -- open SSE readers --------------------------------------------------------------------------------


@dataclass
class Reader:
    """One open SSE connection following an answer; ``last`` is when it last received anything."""

    opened: float = 0.0
    last: float = 0.0
    events: int = 0
    status: str = "opening"  # opening, open, failed:<why>, ended
    task: asyncio.Task | None = None


async def hold_reader(
    client: httpx.AsyncClient, base_url: str, account: Account, stream_url: str, reader: Reader, opened: asyncio.Event
) -> None:
    try:
        async with client.stream(
            "GET",
            f"{base_url}{stream_url}",
            headers={"Cookie": account.cookie},
            timeout=httpx.Timeout(None, connect=30),
        ) as response:
            if response.status_code != 200:
                reader.status = f"failed:{response.status_code}"
                return
            async for line in response.aiter_lines():
                now = time.perf_counter()
                if line:
                    if reader.status == "opening":
                        reader.status = "open"
                        reader.opened = now
                        opened.set()
                    reader.last = now
                    reader.events += 1
                    if line.startswith("event: done") or line.startswith("event: error"):
                        reader.status = "ended"
                        return
            reader.status = "ended"
    except asyncio.CancelledError:
        raise
    except httpx.TimeoutException:
        reader.status = "failed:timeout"
    except (httpx.HTTPError, OSError) as exc:
        reader.status = f"failed:{type(exc).__name__}"
    finally:
        opened.set()

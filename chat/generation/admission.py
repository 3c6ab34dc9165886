"""Admission control: shed load before it reaches a saturated engine, free tier first.

Two measures of load decide, and the busier one wins:

- the engines' own: the last load samples of the nodes that could serve the model (queued requests
  and KV-cache usage, polled from SGLang; see inference.routing.pressure for the thresholds). A model
  is as busy as its least busy node, since the router would send the request there. Nodes without a
  fresh sample are not counted as idle; with none at all, only the count below decides.
- the product's own count of generations in flight, web answers and API completions alike.

Below the soft threshold everyone is admitted; between soft and hard only the premium class; above
hard a premium request waits (at most ADMISSION_PREMIUM_WAIT_SECONDS) for a place, holding no database
connection meanwhile, and everyone else gets 503 with Retry-After at once. At most
ADMISSION_PREMIUM_WAITERS wait in one process; the next premium request is refused at once too, since
each waiter holds its request's (or WebSocket command's) thread and tries again as places are given
back. Before that, a free request
for a busy model whose plan names a fallback model with idle engines is served by the fallback instead
(`serve_model`).

Every generation in flight, a web answer or an API completion, holds a lease in one count shared
by every process: a sorted set in Redis (member: the generation's request id; score: when its lease
runs out), or this process's memory in the embedded default. Admitting is one atomic step (drop
lapsed leases, count, compare with the thresholds, add), so two processes cannot both take the last
place. A running generation renews its lease with its heartbeat and gives it back when it ends; the
lease of a process that died simply runs out, so a crash never leaves the count too high for long.

The count's thresholds are ADMISSION_SOFT_LIMIT and ADMISSION_HARD_LIMIT.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils.translation import gettext_lazy

from chat.generation.streams import heartbeat_ttl
from chat.generation.turn import TurnContext, answer_room
from config import metrics, tracing
from config.redis import async_client, sync_client
from config.refusals import Busy
from inference import fleet, routing
from inference.catalogue import AUTO, get_model

PREMIUM = "premium"
KEY = "sglchat:inflight"

ADMIT_SCRIPT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[5]) then return {0, n} end
if n >= tonumber(ARGV[4]) and ARGV[6] ~= '1' then return {-1, n} end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
return {1, n + 1}
"""

EVERYONE_BUSY = gettext_lazy("Every model server is busy right now. Retrying shortly.")
FREE_SHED = gettext_lazy("The servers are busy, and paid plans go first at busy times. Retrying shortly.")


def _verdict(count: int, soft: int, hard: int, premium: bool) -> int:
    """With `count` generations in flight: 1 room, -1 room for premium only, 0 none (ADMIT_SCRIPT decides
    the same in Redis)."""
    if count >= hard:
        return 0
    if count >= soft and not premium:
        return -1
    return 1


def _refusal(verdict: int) -> Busy:
    """What a request refused with `verdict` (0 or -1) is told."""
    return Busy(EVERYONE_BUSY, retry_after=5) if verdict == 0 else Busy(FREE_SHED, retry_after=10)


def _lease_until(now: float) -> float:
    return now + heartbeat_ttl()


class _LocalLeases:
    """The same count in this process's memory (the embedded default runs one process)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._leases: dict[str, float] = {}

    def admit(self, generation_id: str, soft: int, hard: int, premium: bool) -> tuple[int, int]:
        now = time.time()
        with self._lock:
            self._leases = {gid: until for gid, until in self._leases.items() if until > now}
            count = len(self._leases)
            verdict = _verdict(count, soft, hard, premium)
            if verdict != 1:
                return verdict, count
            self._leases[generation_id] = _lease_until(now)
            return 1, count + 1

    def renew(self, generation_ids: Iterable[str]) -> None:
        until = _lease_until(time.time())
        with self._lock:
            for gid in generation_ids:
                if gid in self._leases:
                    self._leases[gid] = until

    def release(self, generation_id: str) -> None:
        with self._lock:
            self._leases.pop(generation_id, None)

    def count(self) -> int:
        now = time.time()
        with self._lock:
            return sum(1 for until in self._leases.values() if until > now)

    def clear(self) -> None:
        with self._lock:
            self._leases.clear()


_local = _LocalLeases()
_admit_script = None


class _LastCount:
    """The count of generations in flight as this process's last admission saw it, and when: at busy
    times admissions come many times a second, so it is a fresh answer that costs no round trip."""

    #: Older than this, it is not used (releases since then are not seen in it).
    FRESH_SECONDS = 0.5

    def __init__(self) -> None:
        self._seen: tuple[int, float] | None = None

    def seen(self, count: int) -> None:
        self._seen = (count, time.monotonic())

    def one_given_back(self) -> None:
        """A place given back in this process: one fewer in flight than last seen (others' are not seen)."""
        seen = self._seen
        if seen is not None:
            self._seen = (max(seen[0] - 1, 0), seen[1])

    def forget(self) -> None:
        self._seen = None

    def fresh(self) -> int | None:
        seen = self._seen
        if seen is None or time.monotonic() - seen[1] > self.FRESH_SECONDS:
            return None
        return seen[0]


_last_count = _LastCount()


def forget_last_count() -> None:
    """Forget the count the last admission saw (a test that starts from another count)."""
    _last_count.forget()


def _admit_on(client, *args) -> int:
    global _admit_script
    if _admit_script is None:
        _admit_script = client.register_script(ADMIT_SCRIPT)
    verdict, count = _admit_script(keys=[KEY], args=list(args), client=client)
    _last_count.seen(int(count))
    return int(verdict)


def _take_place(generation_id: str, premium: bool, engines: int | None) -> int:
    """1: admitted (a lease is taken); -1: only premium may pass now; 0: nobody may."""
    if engines == routing.HARD:
        return 0
    if engines == routing.SOFT and not premium:
        return -1
    soft, hard = settings.ADMISSION_SOFT_LIMIT, settings.ADMISSION_HARD_LIMIT
    client = sync_client()
    if client is None:
        verdict, count = _local.admit(generation_id, soft, hard, premium)
        _last_count.seen(count)
        return verdict
    now = time.time()
    return _admit_on(client, now, _lease_until(now), generation_id, soft, hard, "1" if premium else "0")


def _give_back_database_connection() -> None:
    """Before a wait: this thread's database connection goes back to the pool (the next query borrows
    one again), so requests waiting for a place never empty the pool for everyone else. Nothing waits
    inside a transaction (admission runs before the turn's is opened); if something ever did, its
    connection is kept, as closing it would end the transaction."""
    if not connection.in_atomic_block:
        connection.close()


class _WaitingLine:
    """The premium requests of this process waiting for a place: at most ADMISSION_PREMIUM_WAITERS,
    each woken as soon as a place is given back here (places elsewhere are seen at the next poll)."""

    def __init__(self) -> None:
        self._freed = threading.Condition()
        self.waiting = 0
        #: Places given back in this process so far: a waiter compares it with what it saw before its
        #: last try, so a place given back between that try and its wait is not missed.
        self.given_back = 0

    def has_room(self) -> bool:
        return self.waiting < settings.ADMISSION_PREMIUM_WAITERS

    @contextlib.contextmanager
    def join(self) -> Iterator[bool]:
        """A place in the line: False when it is full (the request is refused at once)."""
        with self._freed:
            joined = self.has_room()
            if joined:
                self.waiting += 1
        try:
            yield joined
        finally:
            if joined:
                with self._freed:
                    self.waiting -= 1

    def wait(self, seconds: float, *, seen: int) -> None:
        """Until a place is given back here after `seen` (the count before the last try), or `seconds`."""
        with self._freed:
            self._freed.wait_for(lambda: self.given_back != seen, seconds)

    def place_freed(self) -> None:
        with self._freed:
            self.given_back += 1
            self._freed.notify()


_line = _WaitingLine()


def admit_request(turn: TurnContext, generation_id: str) -> None:
    """Take a place for `generation_id`, or raise Busy (503 with Retry-After) when there is none for
    this turn's class of request. A premium request waits for a place for a bounded time first, when
    the line of those waiting has room."""
    premium = turn.priority == PREMIUM
    deadline = time.monotonic() + (settings.ADMISSION_PREMIUM_WAIT_SECONDS if premium else 0)
    with tracing.span("admission") as span:
        seen = _line.given_back
        engines = routing.model_pressure(turn.model.id)
        verdict = _take_place(generation_id, premium, engines)
        waited = False
        if verdict != 1 and time.monotonic() < deadline:
            with _line.join() as waiting:
                if waiting:
                    waited = True
                    _give_back_database_connection()
                    with (
                        metrics.ADMISSION_WAITING.track_inprogress(),
                        tracing.span("admission wait"),
                    ):
                        while verdict != 1 and (left := deadline - time.monotonic()) > 0:
                            _line.wait(min(settings.ADMISSION_WAIT_POLL_SECONDS, left), seen=seen)
                            fleet.invalidate()
                            seen = _line.given_back
                            engines = routing.model_pressure(turn.model.id)
                            verdict = _take_place(generation_id, premium, engines)
                            # Reading the fleet again borrowed a connection: back to the pool before the
                            # next wait (kept, a few waiters would hold the whole pool for their wait).
                            _give_back_database_connection()
        by_engines = engines == routing.HARD or (engines == routing.SOFT and not premium)
        tracing.record(
            span,
            {
                "sglchat.admission.class": "premium" if premium else "standard",
                "sglchat.admission.decision": "admitted" if verdict == 1 else "refused",
                "sglchat.admission.reason": _why(verdict, by_engines),
                "sglchat.admission.waited": waited,
                "sglchat.admission.in_flight": None if by_engines else _last_count.fresh(),
            },
        )
    if verdict != 1:
        raise _refusal(verdict)


def _why(verdict: int, by_engines: bool) -> str:
    """What decided `verdict` (`_take_place`'s order: the engines' load, then the count), in a trace's words."""
    if verdict == 1:
        return "room"
    busy = "engines" if by_engines else "answers in flight"
    return f"{busy} past the hard limit" if verdict == 0 else f"{busy} past the soft limit, premium only"


def refuse_early(turn: TurnContext, *, unless: Callable[[], bool]) -> None:
    """Raise the Busy that admit_request would raise now, from the count this process's last admission
    saw (when it is fresh) and without taking a place: called before the work of admitting a request
    (its prompt, retrieval, rate limit, screening), so that at busy times a refusal skips that work (in
    process, a refused send's fell from about 3.3 to 1.1 ms). Not when `unless()` (a cache may answer
    the request: it needs no place). A premium request that may still wait for a place goes on to
    admit_request, which decides; so does every request when no fresh count is known. The engines'
    load is left to admit_request too: a free request may be served by its plan's fallback model."""
    count = _last_count.fresh()
    if count is None:
        return
    premium = turn.priority == PREMIUM
    verdict = _verdict(count, settings.ADMISSION_SOFT_LIMIT, settings.ADMISSION_HARD_LIMIT, premium)
    if verdict == 1 or (premium and settings.ADMISSION_PREMIUM_WAIT_SECONDS > 0 and _line.has_room()):
        return
    if not unless():
        raise _refusal(verdict)


def serve_model(turn: TurnContext) -> TurnContext:
    """The turn to run: as asked, or, for a free request whose model's engines are past the soft
    threshold, on the plan's fallback model when that model's engines are known to be idle (the
    answer records the model that wrote it)."""
    fallback_id = turn.plan.fallback_model
    if turn.priority == PREMIUM or not fallback_id or fallback_id == turn.model.id:
        return turn
    if (routing.model_pressure(turn.model.id) or routing.OK) < routing.SOFT:
        return turn
    fallback = get_model(fallback_id)
    if fallback is None or fallback.kind == AUTO or routing.model_pressure(fallback.id) != routing.OK:
        return turn
    room = min(turn.max_output_tokens, answer_room(turn.plan, fallback))
    return dataclasses.replace(turn, model=fallback, max_output_tokens=room)


async def renew(generation_ids: Iterable[str]) -> None:
    """Extend the leases of generations that are still running (their heartbeat calls this)."""
    ids = list(generation_ids)
    if not ids:
        return
    client = async_client()
    if client is None:
        _local.renew(ids)
        return
    until = _lease_until(time.time())
    await client.zadd(KEY, dict.fromkeys(ids, until), xx=True)


def _given_back_here() -> None:
    """A place was given back in this process: one fewer in flight than the last count seen, and a
    premium request waiting here may take it."""
    _last_count.one_given_back()
    _line.place_freed()


async def release(generation_id: str, *, along: Callable[[Any], None] | None = None) -> None:
    """Give the place back (none when `generation_id` is empty). `along` adds the caller's own Redis
    work to the same pipeline, one round trip for both; where there is no Redis it is called with None."""
    client = async_client()
    if client is None:
        if generation_id:
            _local.release(generation_id)
        if along is not None:
            along(None)
    else:
        async with client.pipeline(transaction=False) as pipe:
            if generation_id:
                pipe.zrem(KEY, generation_id)
            if along is not None:
                along(pipe)
            await pipe.execute()
    if generation_id:
        _given_back_here()


def release_now(generation_id: str) -> None:
    """`release` from synchronous code (a request refused after it was admitted)."""
    client = sync_client()
    if client is None:
        _local.release(generation_id)
    else:
        client.zrem(KEY, generation_id)
    _given_back_here()


def in_flight() -> int:
    """Generations holding a live lease now (for staff pages and tests)."""
    client = sync_client()
    if client is None:
        return _local.count()
    return client.zcount(KEY, time.time(), "+inf")

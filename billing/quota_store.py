"""Live quota counters per user and billing period: settled tokens and open reservations.

These counters are a cache of the ledger (UsageRecord in PostgreSQL): when one is missing it is
rebuilt from the ledger, and the nightly reconciliation compares and repairs them. Redis holds them
wherever REDIS_URL is set, so every process and server shares them and a reservation is one atomic
Lua script; the embedded default (one process, no Redis) uses the in-process store, with the same
behaviour behind a lock.

Layout in Redis, per user and period (the period's start as a Unix timestamp):
  <prefix>{<user>:<period>}      hash: "used" = settled billable tokens; "r:<id>" = tokens reserved by
                                 reservation <id>; "seq" = bumped on every settlement
  <prefix>{<user>:<period>}:exp  sorted set: reservation id -> the moment it expires
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import redis
from django.conf import settings

from config.redis import sync_client

PREFIX = "sglchat:billing:quota:"
# A rebuild that keeps losing its race against settlements gives up setting the counter after this
# many tries (the next request or the nightly reconciliation sets it).
MAX_REBUILD_ATTEMPTS = 50

RESERVE_SCRIPT = """
local used = redis.call('HGET', KEYS[1], 'used')
if not used then return {-1, 0, 0} end
local now = tonumber(ARGV[4])
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, id in ipairs(expired) do redis.call('HDEL', KEYS[1], 'r:' .. id) end
if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
local held = 0
local holds = 0
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 2) == 'r:' then
    held = held + tonumber(fields[i + 1])
    holds = holds + 1
  end
end
used = tonumber(used)
if holds >= tonumber(ARGV[7]) then return {-2, used, held} end
local amount = tonumber(ARGV[2])
if used + held + amount > tonumber(ARGV[3]) then return {0, used, held} end
redis.call('HSET', KEYS[1], 'r:' .. ARGV[1], amount)
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[6])
return {1, used, held + amount}
"""

# KEYS[1], KEYS[2]: the hash and expiry set of the period reserved in; KEYS[3]: the hash of the period
# the usage is counted in (a different one when the period rolled over in between).
SETTLE_SCRIPT = """
redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[3], 'used') == 1 then
  redis.call('HINCRBY', KEYS[3], 'used', ARGV[2])
end
redis.call('HINCRBY', KEYS[3], 'seq', 1)
if redis.call('TTL', KEYS[3]) < 0 then redis.call('EXPIRE', KEYS[3], ARGV[4]) end
return 1
"""


@dataclass(frozen=True)
class Hold:
    """The answer to a reservation: admitted or not, and the figures it was decided on. `too_many`:
    refused because the user already holds `at_once` reservations (answers being written)."""

    admitted: bool
    used: int
    held: int
    too_many: bool = False


@dataclass(frozen=True)
class CounterUpdate:
    """A reservation's hold given up, and `billable` tokens counted in period `counted_in` when
    `count` (a settlement; a release counts nothing). Plain data: the caller may send it with Redis
    work of its own, in one round trip (`RedisQuotaStore.queue`)."""

    user_id: int
    reserved_in: int
    rid: str
    counted_in: int
    billable: int
    count: bool
    ttl: int


class RedisQuotaStore:
    def __init__(self, url: str):
        self.client = sync_client(url)
        self._reserve = self.client.register_script(RESERVE_SCRIPT)
        self._settle = self.client.register_script(SETTLE_SCRIPT)

    @staticmethod
    def key(user_id: int, period_key: int) -> str:
        # The braces are a Redis Cluster hash tag: both keys of a user's period live in one slot.
        return f"{PREFIX}{{{user_id}:{period_key}}}"

    def reserve(
        self,
        user_id: int,
        period_key: int,
        rid: str,
        amount: int,
        allowance: int,
        *,
        now: float,
        expires_at: float,
        ttl: int,
        at_once: int,
    ) -> Hold | None:
        """Hold `amount` tokens if they fit and fewer than `at_once` reservations are held; None when the
        counter is missing and must be rebuilt first."""
        key = self.key(user_id, period_key)
        verdict, used, held = self._reserve(
            keys=[key, key + ":exp"], args=[rid, amount, allowance, now, expires_at, ttl, at_once]
        )
        if verdict == -1:
            return None
        return Hold(admitted=verdict == 1, used=int(used), held=int(held), too_many=verdict == -2)

    def apply(self, update: CounterUpdate) -> None:
        self._settle(keys=self._settle_keys(update), args=self._settle_args(update))

    def queue(self, pipe, update: CounterUpdate) -> None:
        """Add `update` to a pipeline of the caller's (sync or asyncio), sent with its own commands.

        EVAL rather than the registered script's EVALSHA: a pipeline holding a registered script first
        asks Redis whether it has it, a round trip of its own. Redis keeps the compiled script either way."""
        keys = self._settle_keys(update)
        pipe.eval(SETTLE_SCRIPT, len(keys), *keys, *self._settle_args(update))

    def _settle_keys(self, update: CounterUpdate) -> list[str]:
        held_key = self.key(update.user_id, update.reserved_in)
        return [held_key, held_key + ":exp", self.key(update.user_id, update.counted_in)]

    @staticmethod
    def _settle_args(update: CounterUpdate) -> list:
        return [update.rid, update.billable, "1" if update.count else "0", update.ttl]

    def snapshot(self, user_id: int, period_key: int) -> tuple[int | None, int]:
        """(settled tokens or None when missing, tokens held by reservations not yet purged)."""
        fields = self.client.hgetall(self.key(user_id, period_key))
        used = fields.get("used")
        held = sum(int(value) for name, value in fields.items() if name.startswith("r:"))
        return (None if used is None else int(used)), held

    def load(
        self, user_id: int, period_key: int, compute: Callable[[], int], *, ttl: int, replace: bool = False
    ) -> tuple[int | None, int]:
        """Set the settled counter from `compute()` (the ledger) when missing, or always with `replace`.

        Returns (value before, value after). WATCH makes it safe against a settlement landing between
        reading the ledger and writing the counter: settlements commit their ledger row first and then
        touch this key, so the write is retried with a fresh ledger total.
        """
        key = self.key(user_id, period_key)
        with self.client.pipeline() as pipe:
            for _ in range(MAX_REBUILD_ATTEMPTS):
                try:
                    pipe.watch(key)
                    raw = pipe.hget(key, "used")
                    before = None if raw is None else int(raw)
                    if before is not None and not replace:
                        pipe.unwatch()
                        return before, before
                    value = compute()
                    pipe.multi()
                    pipe.hset(key, "used", value)
                    pipe.expire(key, ttl)
                    pipe.execute()
                    return before, value
                except redis.WatchError:
                    continue
        value = compute()
        return None, value

    def tracked(self) -> Iterator[tuple[int, int]]:
        """Every (user id, period key) with a counter."""
        for key in self.client.scan_iter(match=PREFIX + "*", count=500):
            if key.endswith(":exp"):
                continue
            user_id, period_key = key[len(PREFIX) + 1 : -1].split(":")
            yield int(user_id), int(period_key)


@dataclass
class _Counter:
    used: int | None = None
    holds: dict[str, tuple[int, float]] = field(default_factory=dict)


class LocalQuotaStore:
    """The same counters in this process's memory, for the embedded default (one process, no Redis)."""

    def __init__(self):
        self._lock = threading.RLock()
        self._counters: dict[tuple[int, int], _Counter] = {}

    def _counter(self, user_id: int, period_key: int) -> _Counter:
        return self._counters.setdefault((user_id, period_key), _Counter())

    def reserve(
        self,
        user_id: int,
        period_key: int,
        rid: str,
        amount: int,
        allowance: int,
        *,
        now: float,
        expires_at: float,
        ttl: int,
        at_once: int,
    ) -> Hold | None:
        with self._lock:
            counter = self._counter(user_id, period_key)
            if counter.used is None:
                return None
            counter.holds = {k: v for k, v in counter.holds.items() if v[1] > now}
            held = sum(amount for amount, _ in counter.holds.values())
            if len(counter.holds) >= at_once:
                return Hold(admitted=False, used=counter.used, held=held, too_many=True)
            if counter.used + held + amount > allowance:
                return Hold(admitted=False, used=counter.used, held=held)
            counter.holds[rid] = (amount, expires_at)
            return Hold(admitted=True, used=counter.used, held=held + amount)

    def apply(self, update: CounterUpdate) -> None:
        with self._lock:
            self._counter(update.user_id, update.reserved_in).holds.pop(update.rid, None)
            target = self._counter(update.user_id, update.counted_in)
            if update.count and target.used is not None:
                target.used += update.billable

    def snapshot(self, user_id: int, period_key: int) -> tuple[int | None, int]:
        with self._lock:
            counter = self._counter(user_id, period_key)
            return counter.used, sum(amount for amount, _ in counter.holds.values())

    def load(
        self, user_id: int, period_key: int, compute: Callable[[], int], *, ttl: int, replace: bool = False
    ) -> tuple[int | None, int]:
        # The lock is held across the ledger read, so no settlement can slip in between.
        with self._lock:
            counter = self._counter(user_id, period_key)
            before = counter.used
            if before is not None and not replace:
                return before, before
            counter.used = compute()
            return before, counter.used

    def tracked(self) -> Iterator[tuple[int, int]]:
        with self._lock:
            keys = [key for key, counter in self._counters.items() if counter.used is not None]
        yield from keys

    def clear(self) -> None:
        with self._lock:
            self._counters.clear()


_stores: dict[str, RedisQuotaStore | LocalQuotaStore] = {}
_stores_lock = threading.Lock()


def get_store() -> RedisQuotaStore | LocalQuotaStore:
    """Redis when REDIS_URL is set, else this process's memory; one store per address per process."""
    url = settings.REDIS_URL
    with _stores_lock:
        if url not in _stores:
            _stores[url] = RedisQuotaStore(url) if url else LocalQuotaStore()
        return _stores[url]

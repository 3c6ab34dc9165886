"""Generation requests sent to each node, and how many of them failed, a minute at a time.

What a rollout's error-rate gate reads (evals.rollouts): a failure before the first token is tried again
on another node, so the person sees an answer and the saved answer names the node that gave it; only
here is the failed try counted against the version that failed it. Counted only for models with Model
routes (under a rollout, or after one while its routes stay; the router marks their jobs), in Redis so
every process's requests add up (one round trip per request), or in this process's memory where there is
no Redis (the embedded default's one process; counts older than KEEP_SECONDS are dropped as new ones come).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable

from redis.exceptions import RedisError

from config import metrics, redis

BUCKET_SECONDS = 60
#: How long a minute's counts are kept: longer than any rollout step watches.
KEEP_SECONDS = 6 * 3600

_lock = threading.Lock()
_local: Counter[tuple[str, int, str]] = Counter()


def _key(node: str, bucket: int) -> str:
    return f"sglchat:node-requests:{node}:{bucket}"


async def count(node: str, *, failed: bool) -> None:
    """One generation request sent to `node` ended: answered, or `failed` because of the node. Never
    raises: a count that cannot be kept is a gate's sample the smaller, not a failed answer."""
    metrics.NODE_REQUESTS.labels(node, "failed" if failed else "answered").inc()
    bucket = int(time.time()) // BUCKET_SECONDS
    client = redis.async_client()
    if client is None:
        with _lock:
            if (node, bucket, "sent") not in _local:  # a new minute: forget those past keeping
                oldest = bucket - KEEP_SECONDS // BUCKET_SECONDS
                for stale in [key for key in _local if key[1] < oldest]:
                    del _local[stale]
            _local[(node, bucket, "sent")] += 1
            _local[(node, bucket, "failed")] += int(failed)
        return
    key = _key(node, bucket)
    try:
        async with client.pipeline(transaction=False) as pipe:
            pipe.hincrby(key, "sent", 1)
            if failed:
                pipe.hincrby(key, "failed", 1)
            pipe.expire(key, KEEP_SECONDS)
            await pipe.execute()
    except RedisError:
        pass


def totals(nodes: Iterable[str], since: float) -> tuple[int, int]:
    """(requests sent, of which failed) to `nodes` since the Unix time `since`, by whole minutes (the
    minute `since` falls in counts whole)."""
    names = list(nodes)
    buckets = range(int(since) // BUCKET_SECONDS, int(time.time()) // BUCKET_SECONDS + 1)
    client = redis.sync_client()
    if client is None:
        with _lock:
            sent = sum(_local[(n, b, "sent")] for n in names for b in buckets)
            failed = sum(_local[(n, b, "failed")] for n in names for b in buckets)
        return sent, failed
    pipe = client.pipeline(transaction=False)
    for name in names:
        for bucket in buckets:
            pipe.hmget(_key(name, bucket), "sent", "failed")
    sent = failed = 0
    for got_sent, got_failed in pipe.execute():
        sent += int(got_sent or 0)
        failed += int(got_failed or 0)
    return sent, failed

"""The nodes' last load samples: written by the poller, read by every process's router.

In Redis (one key per node, JSON with the time it was taken), or in this process's memory in the
embedded default, where the poller runs inside the one Daphne process. A sample older than
INFERENCE_SAMPLE_MAX_AGE is treated as no sample at all: stale load is unknown load, not idle.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterable

from django.conf import settings

from config.redis import sync_client
from inference.loads import EngineLoad

KEY = "sglchat:node-load:{name}"
#: What the poller judged of a node that has no row (SGLANG_URL's "default"): its health and counters.
STATE_KEY = "sglchat:node-state:{name}"
_FIELDS = {field.name for field in dataclasses.fields(EngineLoad)}
_lock = threading.Lock()
_local: dict[str, str] = {}


def _encode(load: EngineLoad, at: float) -> str:
    return json.dumps({**dataclasses.asdict(load), "at": at})


def _decode(raw: str | None, now: float) -> tuple[EngineLoad, float] | None:
    if not raw:
        return None
    data = json.loads(raw)
    at = float(data.get("at", 0))
    if now - at > settings.INFERENCE_SAMPLE_MAX_AGE:
        return None
    return EngineLoad(**{k: v for k, v in data.items() if k in _FIELDS}), at


def _kept_seconds() -> int:
    """How long Redis keeps a node's sample or judgement: a little past a sample's useful age, so it
    forgets nodes that are gone; a judgement the poller has not renewed within it is no judgement."""
    return max(int(settings.INFERENCE_SAMPLE_MAX_AGE * 3), 30)


def record(name: str, load: EngineLoad) -> None:
    raw = _encode(load, time.time())
    client = sync_client()
    if client is None:
        with _lock:
            _local[name] = raw
        return
    client.set(KEY.format(name=name), raw, ex=_kept_seconds())


def forget(name: str) -> None:
    client = sync_client()
    if client is None:
        with _lock:
            _local.pop(name, None)
        return
    client.delete(KEY.format(name=name))


def fresh(names: Iterable[str]) -> dict[str, tuple[EngineLoad, float]]:
    """{name: (load, when taken)} for the nodes with a fresh sample; one round trip."""
    names = list(names)
    if not names:
        return {}
    client = sync_client()
    if client is None:
        with _lock:
            raws = [_local.get(name) for name in names]
    else:
        raws = client.mget([KEY.format(name=name) for name in names])
    now = time.time()
    found = {}
    for name, raw in zip(names, raws, strict=True):
        sample = _decode(raw, now)
        if sample is not None:
            found[name] = sample
    return found


def keep_judged(name: str, url: str, state: dict) -> None:
    """Keep what the poller judged of node `name` at `url` (a node without a row: its health, counters,
    last check and error, as a row would hold them)."""
    raw = json.dumps({**state, "url": url})
    client = sync_client()
    if client is None:
        with _lock:
            _local[STATE_KEY.format(name=name)] = raw
        return
    client.set(STATE_KEY.format(name=name), raw, ex=_kept_seconds())


def judged(name: str, url: str) -> dict | None:
    """What `keep_judged` kept of `name`, if it was judged at `url` (the address may have changed since)
    and lately (the poller may have stopped)."""
    client = sync_client()
    if client is None:
        with _lock:
            raw = _local.get(STATE_KEY.format(name=name))
    else:
        raw = client.get(STATE_KEY.format(name=name))
    state = json.loads(raw) if raw else None
    if not state or state.get("url") != url:
        return None
    # A judgement the poller has not renewed lately (it stopped) is no judgement: the node is unknown again.
    if time.time() - float(state.get("last_checked", 0)) > _kept_seconds():
        return None
    return state

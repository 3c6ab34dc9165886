"""An engine's current load, read from whichever endpoint its SGLang version (or the gateway) has.

SGLang 0.5.23 answers ``GET /v1/loads``; older 0.5.x releases (and the Model Gateway's
``power_of_two`` policy) use the legacy ``GET /get_load`` array; any SGLang started with
``--enable-metrics`` serves Prometheus ``GET /metrics``; the gateway merges its workers' metrics at
``GET /engine_metrics`` (renaming ``sglang:x`` to ``sglang_x``). The parsers below give one shape,
summed over data-parallel ranks (and, for the gateway, over workers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class EngineLoad:
    """Requests and KV tokens in use on one engine (or behind one gateway)."""

    running_requests: int
    waiting_requests: int
    #: KV tokens in use (the legacy endpoint adds queued prompt tokens to this, as SGLang does).
    used_tokens: int
    #: The KV pool's size in tokens, when the endpoint reports it.
    total_tokens: int | None = None
    #: Fraction of the KV pool in use (evictable cache excluded), when reported.
    token_usage: float | None = None
    #: The running-batch cap, when reported.
    max_running_requests: int | None = None
    #: Prefix-cache hit rate of the latest prefill batch, when reported.
    cache_hit_rate: float | None = None
    #: Generated tokens per second, when reported.
    gen_throughput: float | None = None
    #: Which endpoint the figures came from: "v1/loads", "get_load", "metrics" or "engine_metrics".
    source: str = ""

    @property
    def total_requests(self) -> int:
        return self.running_requests + self.waiting_requests


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _floats(ranks: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in ranks if isinstance(r.get(key), int | float)]


def from_v1_loads(body: dict[str, Any]) -> EngineLoad:
    loads = [rank for rank in body.get("loads") or [] if isinstance(rank, dict)]
    total = [_int(rank.get("max_total_num_tokens")) for rank in loads]
    cap = [_int(rank.get("max_running_requests")) for rank in loads]
    usage, hits, throughput = (_floats(loads, k) for k in ("token_usage", "cache_hit_rate", "gen_throughput"))
    return EngineLoad(
        running_requests=sum(_int(rank.get("num_running_reqs")) for rank in loads),
        waiting_requests=sum(_int(rank.get("num_waiting_reqs")) for rank in loads),
        used_tokens=sum(_int(rank.get("num_used_tokens")) for rank in loads),
        total_tokens=sum(total) if any(total) else None,
        token_usage=max(usage) if usage else None,
        max_running_requests=sum(cap) if any(cap) else None,
        cache_hit_rate=sum(hits) / len(hits) if hits else None,
        gen_throughput=sum(throughput) if throughput else None,
        source="v1/loads",
    )


def from_get_load(body: list[dict[str, Any]]) -> EngineLoad:
    ranks = [rank for rank in body if isinstance(rank, dict)]
    waiting = sum(_int(rank.get("num_waiting_reqs")) for rank in ranks)
    return EngineLoad(
        running_requests=sum(_int(rank.get("num_reqs")) for rank in ranks) - waiting,
        waiting_requests=waiting,
        used_tokens=sum(_int(rank.get("num_tokens")) for rank in ranks),
        source="get_load",
    )


_PREFIXES = ("sglang:", "sglang_")


def _families(text: str):
    try:
        return list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ValueError(f"unreadable metrics: {exc}") from exc


def from_metrics(text: str, *, source: str = "metrics") -> EngineLoad:
    """Sum each gauge over its label sets (ranks, or workers behind the gateway) from Prometheus text,
    read with prometheus_client's own parser."""
    samples = [sample for family in _families(text) for sample in family.samples]
    return _from_samples(samples, source=source)


def per_worker(text: str, *, label: str = "worker_addr") -> dict[str, EngineLoad]:
    """The gateway's merged `/engine_metrics`, one load per worker (by its `worker_addr` label)."""
    groups: dict[str, list] = {}
    for family in _families(text):
        for sample in family.samples:
            worker = sample.labels.get(label)
            if worker:
                groups.setdefault(worker, []).append(sample)
    loads = {}
    for worker, samples in groups.items():
        try:
            loads[worker] = _from_samples(samples, source="engine_metrics")
        except ValueError:
            continue  # a worker without the gauges (still starting)
    return loads


def _from_samples(samples, *, source: str) -> EngineLoad:
    values: dict[str, float] = {}
    counts: dict[str, int] = {}
    # Fractions of one rank's pool: the node is as full as its fullest rank (a sum could pass 1).
    highest: dict[str, float] = {}
    for sample in samples:
        if not sample.name.startswith(_PREFIXES):
            continue
        name = sample.name[len("sglang:") :]
        values[name] = values.get(name, 0.0) + float(sample.value)
        counts[name] = counts.get(name, 0) + 1
        highest[name] = max(highest.get(name, float(sample.value)), float(sample.value))
    if "num_running_reqs" not in values:
        raise ValueError("no sglang:num_running_reqs in the metrics")
    total = values.get("max_total_num_tokens")
    used = values.get("num_used_tokens", 0.0)
    hit = values.get("cache_hit_rate")
    return EngineLoad(
        running_requests=int(values["num_running_reqs"]),
        waiting_requests=int(values.get("num_queue_reqs", 0)),
        used_tokens=int(used),
        total_tokens=int(total) if total else None,
        token_usage=round(used / total, 4) if total else highest.get("token_usage"),
        cache_hit_rate=hit / counts["cache_hit_rate"] if hit is not None else None,
        gen_throughput=values.get("gen_throughput"),
        source=source,
    )

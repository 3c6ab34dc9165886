"""The service's load over the last hour, for the dashboard: sampled, kept per minute as its peak.

The engines' load is only ever the latest sample (inference.fleet), and the count of generations in
flight only the current one (chat.generation.admission), so `record()` (the Celery task
console.tasks.record_service_load, every 15 seconds in CELERY_BEAT_SCHEDULE, which the embedded
default runs in-process) reads both and keeps, per minute, the largest value of each: generations in
flight, and each node's running and queued requests. A node without a fresh load sample adds
nothing that minute (the chart shows a gap, not a zero).
"""

from __future__ import annotations

from chat.generation import admission
from config.per_minute import MinutePeaks
from inference import fleet

SERVICE_LOAD = MinutePeaks("service-load")
IN_FLIGHT = "in_flight"


def _field(kind: str, node: str) -> str:
    return f"{kind}:{node}"


def record(*, now: float | None = None) -> dict[str, int]:
    """Sample the load now and keep it in this minute's peaks; returns what was sampled."""
    values = {IN_FLIGHT: admission.in_flight()}
    for node in fleet.snapshot():
        if node.load is not None:
            values[_field("running", node.name)] = node.load.running_requests
            values[_field("waiting", node.name)] = node.load.waiting_requests
    SERVICE_LOAD.record(values, now=now)
    return values


def per_minute(first_minute: int, minutes: int) -> dict:
    """Peaks for each minute from `first_minute` (a minute since the epoch), oldest first: generations
    in flight, and per node (every node sampled in those minutes) running and queued requests; None
    for a minute without a sample."""
    rows = SERVICE_LOAD.read(first_minute, minutes)
    names = sorted({field.split(":", 1)[1] for row in rows for field in row if ":" in field})
    return {
        "in_flight": [row.get(IN_FLIGHT) for row in rows],
        "nodes": {
            name: {kind: [row.get(_field(kind, name)) for row in rows] for kind in ("running", "waiting")}
            for name in names
        },
    }

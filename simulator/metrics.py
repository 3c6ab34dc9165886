"""Prometheus text exposition with SGLang's metric names (``sglang:…``), without a client library.

Counters and histograms accumulate here; gauges are read from the scheduler at scrape time, as
SGLang's scheduler publishes its latest stats. Every series carries ``model_name`` plus the
engine/rank labels SGLang's scheduler collector uses (clients shouldn't rely on the exact set).
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from dataclasses import dataclass, field

LATENCY_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    60.0,
    120.0,
]
TOKEN_BUCKETS = [10, 50, 100, 200, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000]


@dataclass
class Histogram:
    buckets: list[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1


class Throughput:
    """Tokens per second over a sliding window; falls to 0 when the engine goes idle."""

    def __init__(self, window_s: float = 5.0) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()

    def add(self, tokens: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._events.append((now, tokens))
        self._trim(now)  # bounded even if nobody ever reads the rate

    def rate(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self._trim(now)
        return sum(n for _, n in self._events) / self.window_s

    def _trim(self, now: float) -> None:
        while self._events and self._events[0][0] < now - self.window_s:
            self._events.popleft()


class Metrics:
    def __init__(self, model_name: str) -> None:
        self.labels = {"model_name": model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
        self.counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.histograms: dict[str, Histogram] = {
            "sglang:time_to_first_token_seconds": Histogram(LATENCY_BUCKETS),
            "sglang:e2e_request_latency_seconds": Histogram(LATENCY_BUCKETS),
            "sglang:inter_token_latency_seconds": Histogram(LATENCY_BUCKETS),
            "sglang:queue_time_seconds": Histogram(LATENCY_BUCKETS),
            "sglang:request_time_per_output_token_seconds": Histogram(LATENCY_BUCKETS),
            "sglang:prompt_tokens_histogram": Histogram(TOKEN_BUCKETS),
            "sglang:uncached_prompt_tokens_histogram": Histogram(TOKEN_BUCKETS),
        }
        self.throughput = Throughput()

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0.0) + value

    def observe(self, name: str, value: float) -> None:
        self.histograms[name].observe(value)

    def render(self, gauges: dict[str, float]) -> str:
        lines: list[str] = []
        for name, value in gauges.items():
            lines += [f"# TYPE {name} gauge", f"{name}{_labels(self.labels)} {_num(value)}"]
        seen: set[str] = set()
        for (name, extra), value in sorted(self.counters.items()):
            if name not in seen:
                lines.append(f"# TYPE {name} counter")
                seen.add(name)
            lines.append(f"{name}{_labels({**self.labels, **dict(extra)})} {_num(value)}")
        for name, h in self.histograms.items():
            lines.append(f"# TYPE {name} histogram")
            cumulative = 0
            for bound, count in zip([*h.buckets, float("inf")], h.counts, strict=True):
                cumulative += count
                le = "+Inf" if bound == float("inf") else _num(bound)
                lines.append(f"{name}_bucket{_labels({**self.labels, 'le': le})} {cumulative}")
            lines.append(f"{name}_sum{_labels(self.labels)} {_num(h.total)}")
            lines.append(f"{name}_count{_labels(self.labels)} {h.n}")
        return "\n".join(lines) + "\n"


def _labels(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else f"{float(value):.1f}"

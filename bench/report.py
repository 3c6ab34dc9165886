"""What every phase of `make bench` shares: figures from samples, and the helpers of its tables.

Each phase (bench/matrix.py, profiling.py, history.py, overload.py, abuse.py, readers.py, routing.py)
measures and renders itself with these; bench/doc.py puts the phases together into
bench/results/latest.json and docs/PERFORMANCE.md, and bench/run.py runs them in turn.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from bench.load import Sample

# -- figures -----------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (already in the unit wanted)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def percentiles(seconds: list[float]) -> dict | None:
    if not seconds:
        return None
    ms = [s * 1000 for s in seconds]
    return {
        "p50": round(percentile(ms, 0.50), 1),
        "p95": round(percentile(ms, 0.95), 1),
        "p99": round(percentile(ms, 0.99), 1),
        "mean": round(sum(ms) / len(ms), 1),
        "n": len(ms),
    }


def summarize(
    samples: list[Sample], wall: float, *, server_cpu_s: float | None = None, client_cpu_s: float | None = None
) -> dict:
    ok = [s for s in samples if s.ok]
    errors = Counter(s.status for s in samples if not s.ok)
    refused = [s for s in samples if s.status == "503"]
    wall = max(wall, 1e-9)
    row = {
        "requests": len(samples),
        "ok": len(ok),
        "errors": dict(errors),
        "ttft_ms": percentiles([s.latency for s in ok]),
        "answer_ms": percentiles([s.total for s in ok]),
        "wall_s": round(wall, 2),
        "answers_per_s": round(len(ok) / wall, 1),
        "tokens_per_s": round(sum(s.tokens for s in ok) / wall, 0),
        "http_500": sum(
            n for status, n in errors.items() if status.isdigit() and status != "503" and int(status) >= 500
        ),
        "refusals": {
            "count": len(refused),
            "ms": percentiles([s.latency for s in refused]),
            "without_retry_after": sum(1 for s in refused if not s.retry_after),
        },
    }
    if server_cpu_s is not None:
        row["server_cpu_s"] = round(server_cpu_s, 2)
        row["cpu_ms_per_answer"] = round(server_cpu_s * 1000 / len(ok), 2) if ok else None
        row["server_cpu_pct"] = round(server_cpu_s / wall * 100)
    if client_cpu_s is not None:
        row["client_cpu_pct"] = round(client_cpu_s / wall * 100)
    examples = {}
    for s in samples:
        if not s.ok and s.status not in examples and s.detail:
            examples[s.status] = s.detail
    if examples:
        row["error_examples"] = examples
    return row


# -- the targets' rows and the tables' cells -----------------------------------------------------------


def target(name: str, figure, target: str, met: bool | None, note: str = "") -> dict:
    """One row of the targets table; ``met`` is None when the figure was not measured."""
    return {"name": name, "figure": figure, "target": target, "met": met, "note": note}


def ms(value) -> str:
    return "not measured" if value is None else f"{value:.1f} ms"


def pct(rate: float | None) -> str:
    return "not measured" if rate is None else f"{rate * 100:.1f}%"


def errors(counts: dict) -> str:
    return ", ".join(f"{status}: {n}" for status, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def mark(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "-"}[met]


def targets_text(rows: list[dict]) -> str:
    lines = ["\nTargets"]
    for row in rows:
        lines.append(f"  [{mark(row['met']).strip('*'):>6}] {row['name']}: {row['figure']} (target {row['target']})")
    return "\n".join(lines)


def save(fig, path: Path) -> Path:
    """A plot as a PNG beside the results."""
    fig.savefig(path, dpi=110)
    return path

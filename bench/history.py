"""The history phase of `make bench`: the sidebar and a conversation with a long history.

One user with 10,000 conversations (2,000 with --quick), one of them 2,000 messages long (500),
beside one with 10 short ones: each page is timed through the matrix's Daphne (bench/matrix.py,
`instant`), and its SQL queries are counted in-process with Django's test client, to show they do
not grow with the history.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench import load, matrix, report

if TYPE_CHECKING:
    from bench.run import Bench


def run(bench: Bench) -> None:
    from bench import data

    conversations, messages = (2000, 500) if bench.args.quick else (10_000, 2000)
    reps = 20 if bench.args.quick else 50
    matrix.instant(bench)
    result = {"conversations": conversations, "messages": messages, "requests_each": reps}
    try:
        t = time.perf_counter()
        big, small = (
            data.create_accounts("history", 1, "bench-premium", api_keys=False)[0],
            data.create_accounts("small-history", 1, "bench-premium", api_keys=False)[0],
        )
        big_id = data.create_history(big, conversations, messages)
        small_id = data.create_history(small, 10, 10)
        result["setup_s"] = round(time.perf_counter() - t, 1)
        result |= asyncio.run(page_timings(bench, big, big_id, small, small_id, reps))
        result["queries"] = {"large": data.query_counts(big, big_id), "small": data.query_counts(small, small_id)}
    except Exception as exc:
        result["error"] = bench.failure(exc)
    bench.results["phases"]["history"] = result
    bench.log(text(result))


async def page_timings(bench: Bench, big, big_id, small, small_id, reps: int) -> dict:
    out = {}
    async with load.http_client(bench.timeout) as client:
        for label, account, conversation in (("large", big, big_id), ("small", small, small_id)):
            for page, path in (
                ("sidebar", "/chat/api/conversations"),
                ("conversation", f"/chat/api/conversations/{conversation}"),
            ):
                times, statuses, size = [], {}, 0
                until = time.perf_counter() + 60
                for _ in range(reps + 2):
                    if time.perf_counter() > until:
                        statuses["stopped: 60 s"] = 1
                        break
                    started = time.perf_counter()
                    response = await client.get(f"{bench.daphne.url}{path}", headers={"Cookie": account.cookie})
                    times.append(time.perf_counter() - started)
                    statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1
                    size = len(response.content)
                times = times[2:]  # the first two warm caches and connections
                out[f"{label}_{page}"] = {"ms": report.percentiles(times), "statuses": statuses, "bytes": size}
    return out


# -- its targets, console text and part of the doc ------------------------------------------------


def targets(history: dict) -> list[dict]:
    """Its rows of the targets table: each page's p50, and its queries not growing with the history."""
    out = []
    for page in ("sidebar", "conversation"):
        figure = (history.get(f"large_{page}") or {}).get("ms")
        out.append(
            report.target(
                f"{page} load p50 ({history.get('conversations', '?')} conversations, "
                f"{history.get('messages', '?')} messages)",
                report.ms(figure and figure["p50"]),
                "< 50 ms",
                None if not figure else figure["p50"] < 50,
            )
        )
        queries = history.get("queries") or {}
        large, small = (queries.get("large") or {}).get(page), (queries.get("small") or {}).get(page)
        out.append(
            report.target(
                f"{page} SQL queries, large vs small history",
                "not measured" if large is None else f"{large} vs {small}",
                "the same",
                None if large is None else large == small and large >= 0,
            )
        )
    return out


def text(result: dict) -> str:
    if "error" in result:
        return f"\nHistory at scale: failed: {result['error']}"
    lines = [
        f"\nHistory at scale ({result['conversations']} conversations, one of {result['messages']} messages; "
        f"{result['requests_each']} requests each)"
    ]
    for key in ("large_sidebar", "large_conversation", "small_sidebar", "small_conversation"):
        row = result.get(key) or {}
        ms = row.get("ms") or {}
        lines.append(
            f"  {key:<20} p50 {ms.get('p50')} ms  p99 {ms.get('p99')} ms  {row.get('bytes')} bytes  "
            f"{row.get('statuses')}"
        )
    lines.append(f"  SQL queries: {result.get('queries')}")
    return "\n".join(lines)


def markdown(results: dict, rel: dict[str, Path]) -> list[str]:
    h = results["phases"].get("history") or {}
    out = ["", "## History at scale", ""]
    if not h or "skipped" in h or "error" in h:
        return [*out, f"Not measured: {h.get('skipped') or h.get('error') or 'not run'}."]
    q = h.get("queries") or {}
    out += [
        f"One user has {h['conversations']:,} conversations, one of them {h['messages']:,} messages long; "
        "another has 10 conversations of at most 10 messages. Each page is requested "
        f"{h['requests_each']} times in a row (after two warm-up requests). SQL queries are counted "
        "in-process, through the same views, with Django's test client.",
        "",
        "| request | history | p50 (ms) | p99 (ms) | bytes | SQL queries |",
        "|---|---|---|---|---|---|",
    ]
    for page, path in (
        ("sidebar", "`GET /chat/api/conversations`"),
        ("conversation", "`GET /chat/api/conversations/<id>`"),
    ):
        for size in ("large", "small"):
            row = h.get(f"{size}_{page}") or {}
            ms = row.get("ms") or {}
            out.append(
                f"| {path} | {size} | {ms.get('p50')} | {ms.get('p99')} | {row.get('bytes')} | "
                f"{(q.get(size) or {}).get(page)} |"
            )
    return out

"""The readers phase of `make bench`: the most open SSE readers one Daphne process holds.

Answers generate at one token a second (they outlast the phase, and readers mostly wait, as people
reading do); readers attach to them in steps, 25 connections opening at a time, until fewer than
99% of those opened are receiving. Per step: readers receiving, Daphne's resident memory and CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench import load, report

if TYPE_CHECKING:
    from bench.run import Bench


def run(bench: Bench) -> None:
    from bench import procs

    steps = [100, 250, 500] if bench.args.quick else [250, 500, 1000, 1500, 2000, 2500]
    result: dict = {"target": 2000, "steps": [], "messages": bench.args.reader_messages}
    engine = daphne = None
    try:
        # One token a second per answer, 900 tokens: the answers outlast the phase, and the
        # readers are mostly waiting, as people reading are.
        engine = bench.start(procs.start_engine("realistic", 900, "--decode-step-time", "1.0"))
        daphne = bench.start(procs.start_daphne(bench.product_env(engine.url), "readers"))
        result["engine"] = "--speed realistic --decode-step-time 1.0 (one token a second), 900-token answers"
        result |= asyncio.run(ramp(bench, daphne, steps))
    except Exception as exc:
        result["error"] = bench.failure(exc)
    finally:
        bench.stop(daphne)
        bench.stop(engine)
    bench.results["phases"]["readers"] = result
    bench.log(text(result))


async def ramp(bench: Bench, daphne, steps: list[int]) -> dict:
    from bench import procs

    owners = bench.accounts["readers"]
    pid = daphne.proc.pid
    out: dict = {"steps": []}
    async with load.http_client(bench.timeout) as client:
        streams = []
        for n, owner in enumerate(owners):
            failed, turn = await load.web_send(client, daphne.url, owner, load.question(n))
            if failed:
                raise RuntimeError(f"could not start an answer to read: {failed.status} {failed.detail}")
            streams.append((owner, turn["assistant_message"]["stream_url"], turn["assistant_message"]["id"]))
        await asyncio.sleep(2)
        base_rss = procs.rss_bytes(pid)
        out["rss_before_mb"] = round(base_rss / 2**20, 1)
        readers: list[load.Reader] = []
        gate = asyncio.Semaphore(25)  # a crowd arriving, not one burst: holding is what is measured

        step_deadline = 0.0

        async def open_one(i: int) -> None:
            owner, url, _ = streams[i % len(streams)]
            reader = load.Reader()
            readers.append(reader)
            opened = asyncio.Event()
            async with gate:
                left = step_deadline - time.perf_counter()
                if left <= 0:
                    reader.status = "failed:not opened within the step's 60 s"
                    return
                reader.task = asyncio.create_task(load.hold_reader(client, daphne.url, owner, url, reader, opened))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(opened.wait(), min(30, left))
                if reader.status == "opening":
                    reader.status = "failed:no first event in 30 s"

        try:
            for target in steps:
                if not bench.budget.allows(45):
                    out["stopped"] = "time budget"
                    break
                t = time.perf_counter()
                step_deadline = t + 60
                await asyncio.gather(*(open_one(i) for i in range(len(readers), target)))
                opening = time.perf_counter() - t
                cpu = procs.cpu_seconds(pid)
                await asyncio.sleep(3)
                cpu = procs.cpu_seconds(pid) - cpu
                now = time.perf_counter()
                fresh = sum(1 for r in readers if r.status == "open" and now - r.last < 5)
                failed: dict[str, int] = {}
                for r in readers:
                    if r.status.startswith("failed") or r.status == "ended":
                        failed[r.status] = failed.get(r.status, 0) + 1
                rss = procs.rss_bytes(pid)
                step = {
                    "readers": target,
                    "receiving": fresh,
                    "failed": failed,
                    "open_s": round(opening, 1),
                    "rss_mb": round(rss / 2**20, 1),
                    "kb_per_reader": round((rss - base_rss) / max(fresh, 1) / 1024, 1),
                    "cpu_pct": round(cpu / 3 * 100),
                }
                out["steps"].append(step)
                bench.log(step_line(step))
                if fresh < 0.99 * target:
                    out["stopped"] = f"only {fresh} of {target} readers were receiving"
                    break
        finally:
            for r in readers:
                if r.task:
                    r.task.cancel()
            await asyncio.gather(*(r.task for r in readers if r.task), return_exceptions=True)
            for owner, _, message_id in streams:
                with contextlib.suppress(Exception):
                    await client.post(
                        f"{daphne.url}/chat/api/messages/{message_id}/stop",
                        headers=load.web_headers(owner, daphne.url),
                    )
    held = [s for s in out["steps"] if s["receiving"] >= 0.99 * s["readers"]]
    out["most_held"] = max((s["receiving"] for s in out["steps"]), default=0)
    out["kb_per_reader"] = held[-1]["kb_per_reader"] if held else None
    return out


# -- its targets, console text, plot and part of the doc ------------------------------------------


def targets(readers: dict) -> list[dict]:
    """Its rows of the targets table: readers held, memory per reader."""
    held, per = readers.get("most_held"), readers.get("kb_per_reader")
    return [
        report.target(
            "open SSE readers held by one process",
            "not measured" if held is None else f"{held}",
            ">= 2,000",
            None if held is None else held >= 2000,
        ),
        report.target(
            "memory per open SSE reader",
            "not measured" if per is None else f"{per:.0f} KB",
            "< 100 KB",
            None if per is None else per < 100,
        ),
    ]


def step_line(step: dict) -> str:
    return (
        f"  {step['readers']:>5} readers: {step['receiving']:>5} receiving, failed {step['failed'] or 0}, "
        f"opened in {step['open_s']} s, Daphne RSS {step['rss_mb']} MB "
        f"({step['kb_per_reader']} KB per reader), CPU {step['cpu_pct']}%"
    )


def text(result: dict) -> str:
    if "error" in result:
        return f"\nOpen SSE readers: failed: {result['error']}"
    per = result.get("kb_per_reader")
    return (
        f"\nOpen SSE readers: most held {result.get('most_held')} (target {result['target']}), "
        + ("memory per reader not measured" if per is None else f"{per} KB each")
        + (f"; stopped: {result['stopped']}" if result.get("stopped") else "")
    )


def plot(plt, readers: dict, out: Path) -> Path | None:
    """readers.png: readers receiving and Daphne's memory against readers opened."""
    steps = readers.get("steps") or []
    if not steps:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([s["readers"] for s in steps], [s["receiving"] for s in steps], marker="o", label="receiving")
    ax.plot([s["readers"] for s in steps], [s["readers"] for s in steps], linestyle=":", color="gray", label="opened")
    ax.set_xlabel("SSE readers opened")
    ax.set_ylabel("readers receiving")
    twin = ax.twinx()
    twin.plot(
        [s["readers"] for s in steps],
        [s["rss_mb"] for s in steps],
        marker="s",
        color="#e6550d",
        label="Daphne RSS (MB)",
    )
    twin.set_ylabel("Daphne RSS (MB)")
    ax.set_title("Open SSE readers on one Daphne process")
    ax.legend(loc="upper left", fontsize=8)
    twin.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return report.save(fig, out / "readers.png")


def markdown(results: dict, rel: dict[str, Path]) -> list[str]:
    r = results["phases"].get("readers") or {}
    out = ["", "## Open SSE readers on one process", ""]
    if not r or "skipped" in r or ("error" in r and not r.get("steps")):
        return [*out, f"Not measured: {r.get('skipped') or r.get('error') or 'not run'}."]
    out += [
        f"{r.get('messages')} answers generate at one token a second ({r.get('engine')}); readers attach "
        "to them (several readers per answer, as several tabs would) in steps, 25 connections opening "
        "at a time. A reader counts as *receiving* if it got an event in the last 5 seconds. Memory per "
        "reader is the growth of Daphne's resident memory over the answers' own, divided by the readers "
        "receiving.",
        "",
        f"Most held: **{r.get('most_held')}** (target 2,000), "
        + (
            f"{r['kb_per_reader']} KB each"
            if r.get("kb_per_reader") is not None
            else "memory per reader not measured (no step had all its readers receiving)"
        )
        + (f"; the ramp stopped: {r['stopped']}." if r.get("stopped") else "."),
        "",
        "| readers opened | receiving | failed | seconds to open | Daphne RSS (MB) | KB per reader | Daphne CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in r.get("steps", []):
        out.append(
            f"| {s['readers']} | {s['receiving']} | {report.errors(s['failed']) or 0} | {s['open_s']} | "
            f"{s['rss_mb']} | {s['kb_per_reader']} | {s['cpu_pct']}% |"
        )
    if r.get("error"):
        out += ["", f"The phase ended with an error: {r['error']}"]
    if "readers" in rel:
        out += ["", f"![Open SSE readers]({rel['readers'].as_posix()})"]
    return out

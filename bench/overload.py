"""The overload phase of `make bench`: three times capacity, half free, half premium.

Sends arrive at random (Poisson) at three times the web path's answers per second at 50 streams
(from the matrix of the same run, or --capacity), through the web path of one Daphne with the
product's own admission limits, against the engine at `realistic` speed. Then every accepted send
is checked: its user message stored, its answer final, one ledger row each (bench/data.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING

from bench import load, report
from bench.load import Sample
from bench.matrix import ANSWER_TOKENS

if TYPE_CHECKING:
    from bench.run import Bench


def run(bench: Bench) -> None:
    from bench import data, procs

    seconds = 8 if bench.args.quick else 15
    result: dict = {"seconds": seconds}
    engine = daphne = None
    try:
        engine = bench.start(procs.start_engine("realistic", ANSWER_TOKENS, "--max-running-requests", "256"))
        daphne = bench.start(procs.start_daphne(bench.product_env(engine.url, admission_raised=False), "overload"))
        web = bench.results["matrix"].get("web@50", {})
        capacity, source = (
            (web["answers_per_s"], "web@50 of this run")
            if web.get("answers_per_s")
            else (bench.args.capacity, "--capacity")
        )
        rate = bench.args.overload_rate or 3 * capacity
        count = min(int(rate * seconds), 6000)
        result |= {
            "engine": f"--speed realistic, {ANSWER_TOKENS}-token answers, --max-running-requests 256",
            "admission": data.admission_limits(),
            "capacity_answers_per_s": round(capacity, 1),
            "capacity_from": source if not bench.args.overload_rate else "--overload-rate",
            "offered_per_s": round(rate, 1),
            "requests": count,
        }
        result |= asyncio.run(offered_load(bench, daphne.url, rate, count))
        accepted = result.pop("_accepted")
        answers = [a["assistant_message_id"] for a in accepted]
        left = data.wait_final(answers, 60)
        if left:
            # Answers whose runner crashed are ended by the reaper, a beat task every 30 s in
            # production; run it once, as beat would, after its heartbeat lifetime.
            time.sleep(data.heartbeat_ttl())
            result["reaped"] = data.reap_stalled()
            left = data.wait_final(answers, 10)
        result["drained"] = left == 0
        result["losses"] = data.check_losses(accepted)
        result["losses"]["other_answers_still_active"] = data.in_flight() - left
    except Exception as exc:
        result["error"] = bench.failure(exc)
    finally:
        bench.stop(daphne)
        bench.stop(engine)
    bench.results["phases"]["overload"] = result
    bench.log(text(result))


async def offered_load(bench: Bench, url: str, rate: float, count: int) -> dict:
    premium, free = bench.accounts["premium"], bench.accounts["free"]
    out = {}
    async with load.http_client(bench.timeout) as client:
        unloaded = []
        until = time.perf_counter() + 30
        for n in range(20):
            if time.perf_counter() > until:
                break
            sample = await load.web_turn(client, url, premium[n % len(premium)], n)
            sample.kind = "premium"
            unloaded.append(sample)
        out["unloaded_premium"] = report.summarize(unloaded, 1.0)["ttft_ms"]

        accepted: list[dict] = []

        def kind(n: int) -> str:
            return "premium" if n % 2 == 0 else "free"

        def one(n: int) -> Awaitable[Sample]:
            pool = premium if kind(n) == "premium" else free
            return load.web_turn(client, url, pool[(n // 2) % len(pool)], 1000 + n, accepted)

        run = await load.open_loop(rate, count, bench.timeout, seed=7, one=one, kind=kind)
    for kind in ("premium", "free"):
        samples = [s for s in run.samples if s.kind == kind]
        out[kind] = report.summarize(samples, run.wall)
    out["all"] = report.summarize(run.samples, run.wall)
    out["wall_s"] = round(run.wall, 1)
    first = min((s.started for s in run.samples), default=0.0)
    out["_timeline"] = [
        (round(s.started - first, 3), s.kind, s.status, round(s.latency * 1000, 1)) for s in run.samples
    ]
    out["_accepted"] = accepted
    return out


# -- its targets, console text, plot and part of the doc ------------------------------------------


def targets(overload: dict) -> list[dict]:
    """Its rows of the targets table."""
    out = []
    everything = overload.get("all")
    if everything:
        refused = everything["refusals"]
        other = {s: n for s, n in everything["errors"].items() if s != "503"}
        out.append(
            report.target(
                "overload: every refusal a 503 with Retry-After",
                f"{refused['count']} x 503 ({refused['without_retry_after']} without Retry-After); "
                f"other failures: {report.errors(other) or 'none'}",
                "all 503 + Retry-After",
                not other and refused["without_retry_after"] == 0,
            )
        )
        ms = refused["ms"]
        out.append(
            report.target(
                "overload: time to answer a refused request, p99",
                report.ms(ms and ms["p99"]),
                "< 50 ms",
                None if not ms else ms["p99"] < 50,
            )
        )
        premium = (overload.get("premium") or {}).get("ttft_ms")
        unloaded = overload.get("unloaded_premium")
        out.append(
            report.target(
                "overload: premium TTFT p99, loaded vs unloaded",
                f"{premium['p99']:.0f} vs {unloaded['p99']:.0f} ms" if premium and unloaded else "not measured",
                "(no number set: shown for comparison)",
                None,
            )
        )
        losses = overload.get("losses") or {}
        out.append(
            report.target(
                "overload: nothing lost (user message stored, answer final, one ledger row each)",
                f"{losses.get('lost', '?')} lost of {losses.get('accepted', '?')} accepted",
                "0 lost",
                None if "lost" not in losses else losses["lost"] == 0,
            )
        )
    else:
        out.append(
            report.target("overload", "not measured", "", None, overload.get("error") or overload.get("skipped", ""))
        )
    return out


def text(result: dict) -> str:
    if "error" in result and "all" not in result:
        return f"\nOverload: failed: {result['error']}"
    lines = [
        f"\nOverload: {result['offered_per_s']} sends/s offered for {result['seconds']} s "
        f"(capacity {result['capacity_answers_per_s']}/s, from {result['capacity_from']}), "
        f"admission {result['admission']}"
    ]
    lines.append(f"  unloaded premium TTFT: {result.get('unloaded_premium')}")
    for kind in ("premium", "free"):
        row = result.get(kind) or {}
        ttft = row.get("ttft_ms") or {}
        refused = row.get("refusals") or {}
        lines.append(
            f"  {kind:<8} {row.get('ok')}/{row.get('requests')} answered, TTFT p50 {ttft.get('p50')} "
            f"p99 {ttft.get('p99')} ms; refused {refused.get('count')} in p50 "
            f"{(refused.get('ms') or {}).get('p50')} p99 {(refused.get('ms') or {}).get('p99')} ms; "
            f"errors {row.get('errors')}"
        )
    lines.append(f"  losses: {result.get('losses')}")
    return "\n".join(lines)


def plot(plt, timeline, out: Path) -> Path | None:
    """overload.png: each send's time to first token or to its refusal, over the window."""
    if not timeline:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    for kind, status, color, marker in (
        ("premium", "ok", "#3182bd", "o"),
        ("free", "ok", "#31a354", "o"),
        ("premium", "503", "#08519c", "x"),
        ("free", "503", "#006d2c", "x"),
    ):
        points = [(t, ms) for t, k, s, ms in timeline if k == kind and (s == status)]
        if points:
            label = f"{kind}: {'TTFT' if status == 'ok' else 'refused (time to 503)'}"
            ax.scatter(*zip(*points, strict=True), s=6, color=color, marker=marker, label=label, alpha=0.6)
    others = [(t, ms) for t, k, s, ms in timeline if s not in ("ok", "503")]
    if others:
        ax.scatter(*zip(*others, strict=True), s=10, color="red", marker="^", label="other failures")
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the first send")
    ax.set_ylabel("ms (log)")
    ax.set_title("Overload: 3x capacity, half free, half premium")
    ax.legend(fontsize=7, markerscale=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return report.save(fig, out / "overload.png")


def markdown(results: dict, rel: dict[str, Path]) -> list[str]:
    o = results["phases"].get("overload") or {}
    out = ["", "## Overload: three times capacity, half free, half premium", ""]
    if "all" not in o:
        return [*out, f"Not measured: {o.get('skipped') or o.get('error') or 'not run'}."]
    offered = (
        f"{o['offered_per_s']} per second for {o['seconds']} s (set by --overload-rate)"
        if o["capacity_from"] == "--overload-rate"
        else f"{o['offered_per_s']} per second for {o['seconds']} s: three times the capacity of "
        f"{o['capacity_answers_per_s']} answers/s ({o['capacity_from']})"
    )
    out += [
        f"Sends arrive at random (Poisson) at {offered}, alternating free and "
        f"premium users, through the web path, against the engine at `realistic` speed ({o.get('engine')}), "
        f"with the product's admission limits (soft {o['admission']['soft']}, hard {o['admission']['hard']} "
        "answers in flight). Unloaded = 20 premium sends one after another just before.",
        "",
        "| class | answered / sent | TTFT p50 / p99 (ms) | refused (503) | time to refuse p50 / p99 (ms) | "
        "503 without Retry-After | other failures |",
        "|---|---|---|---|---|---|---|",
    ]
    unloaded = o.get("unloaded_premium") or {}
    out.append(f"| premium, unloaded | | {unloaded.get('p50')} / {unloaded.get('p99')} | | | | |")
    for kind in ("premium", "free"):
        row = o.get(kind) or {}
        t, ref = row.get("ttft_ms") or {}, row.get("refusals") or {}
        ms = ref.get("ms") or {}
        other = {s: n for s, n in (row.get("errors") or {}).items() if s != "503"}
        out.append(
            f"| {kind} | {row.get('ok')} / {row.get('requests')} | {t.get('p50', '-')} / {t.get('p99', '-')} | "
            f"{ref.get('count')} | {ms.get('p50', '-')} / {ms.get('p99', '-')} | "
            f"{ref.get('without_retry_after')} | {report.errors(other) or 0} |"
        )
    losses = o.get("losses") or {}
    reaped = f"; the reaper ended {o['reaped']} whose runner had died" if o.get("reaped") else ""
    out += [
        "",
        f"Afterwards ({'every accepted answer ended' if o.get('drained') else 'some accepted answers never ended'}"
        f"{reaped}): "
        f"of {losses.get('accepted')} accepted sends, {losses.get('user_messages_missing')} user messages "
        f"missing, {losses.get('user_messages_changed')} changed, {losses.get('answers_not_final')} answers not "
        f"in a final state (by status: {losses.get('answers_by_status')}), "
        f"{losses.get('answers_without_ledger_row')} without a ledger row and {losses.get('extra_ledger_rows')} "
        f"extra ledger rows: **{losses.get('lost')} lost**. Answers to sends the client saw refused or "
        f"failed but still generating at that point: {losses.get('other_answers_still_active')}.",
    ]
    if "overload" in rel:
        out += ["", f"![Overload]({rel['overload'].as_posix()})"]
    return out

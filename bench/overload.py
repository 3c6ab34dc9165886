"""The overload phase of `make bench`: three times capacity, half free, half premium.

First the web path's peak, measured here: 50 streams sending one after another through one Daphne
with the product's own admission limits, against the engine at `realistic` speed. Then sends arrive
at random (Poisson) at three times that peak (or --overload-rate), alternating free and premium
users. Then every accepted send is checked: its user message stored, its answer final, one ledger
row each (bench/data.py).
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
        result |= {
            "engine": f"--speed realistic, {ANSWER_TOKENS}-token answers, --max-running-requests 256",
            "admission": data.admission_limits(),
            "offered_from": "--overload-rate",
        }
        result |= asyncio.run(offered_load(bench, daphne.url, bench.args.overload_rate, seconds))
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


PEAK_STREAMS = 50
PEAK_SECONDS = 10


async def offered_load(bench: Bench, url: str, rate: float | None, seconds: int) -> dict:
    premium, free = bench.accounts["premium"], bench.accounts["free"]
    out = {}
    async with load.http_client(bench.timeout, idle_kept=32) as client:
        unloaded = []
        until = time.perf_counter() + 30
        for n in range(20):
            if time.perf_counter() > until:
                break
            sample = await load.web_turn(client, url, premium[n % len(premium)], n)
            sample.kind = "premium"
            unloaded.append(sample)
        out["unloaded_premium"] = report.summarize(unloaded, 1.0)["ttft_ms"]

        # The web path's peak here (same process, engine and limits): 50 streams one after another.
        def closed(slot: int, n: int) -> Awaitable[Sample]:
            return load.web_turn(client, url, premium[n % len(premium)], 100_000 + n)

        peak = await load.closed_loop(PEAK_STREAMS, 100_000, PEAK_SECONDS, bench.timeout, closed)
        out["peak"] = report.summarize(peak.samples, peak.wall)
        if rate is None:
            rate = 3 * out["peak"]["answers_per_s"]
            out["offered_from"] = f"3 x the peak measured here ({PEAK_STREAMS} streams)"
        count = min(int(rate * seconds), 6000)
        out["offered_per_s"], out["requests"] = round(rate, 1), count

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
                "< 200 ms",
                None if not ms else ms["p99"] < 200,
            )
        )
        peak = (overload.get("peak") or {}).get("answers_per_s")
        kept = everything.get("answers_per_s")
        out.append(
            report.target(
                "overload: answers/s kept, vs the web path's peak measured before it",
                f"{kept} vs {peak}/s ({kept / peak:.0%})" if peak and kept is not None else "not measured",
                ">= 80%",
                None if not peak or kept is None else kept >= 0.8 * peak,
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
    peak = result.get("peak") or {}
    lines = [
        f"\nOverload: {result.get('offered_per_s')} sends/s offered for {result['seconds']} s "
        f"({result.get('offered_from')}), admission {result['admission']}"
    ]
    lines.append(f"  unloaded premium TTFT: {result.get('unloaded_premium')}")
    lines.append(
        f"  peak ({PEAK_STREAMS} streams): {peak.get('answers_per_s')} answers/s, TTFT {peak.get('ttft_ms')}; "
        f"under overload: {(result.get('all') or {}).get('answers_per_s')} answers/s"
    )
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
    peak = o.get("peak") or {}
    everything = o.get("all") or {}
    out += [
        f"First the web path's peak, measured in this phase: {PEAK_STREAMS} streams of premium users, each "
        f"sending as soon as its last answer ended, for {PEAK_SECONDS} s: **{peak.get('answers_per_s')} answers/s** (TTFT p50 / "
        f"p99 {(peak.get('ttft_ms') or {}).get('p50')} / {(peak.get('ttft_ms') or {}).get('p99')} ms). Then "
        f"sends arrive at random (Poisson) at {o.get('offered_per_s')} per second for {o['seconds']} s "
        f"({o.get('offered_from')}), alternating free and premium users, through the web path of the same "
        f"Daphne, against the engine at `realistic` speed ({o.get('engine')}), with the product's admission "
        f"limits (soft {o['admission']['soft']}, hard {o['admission']['hard']} answers in flight): "
        f"**{everything.get('answers_per_s')} answers/s** kept. Unloaded = 20 premium sends one after another "
        "before both.",
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

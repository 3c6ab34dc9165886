"""The matrix phase of `make bench`: time to first token and throughput per path and concurrency.

The engine at `instant` speed (it charges no time, so what is measured is the serving tier) and one
Daphne in front of it; each level keeps that many streams in flight through the engine directly, the
peers (the SGLang Model Gateway and LiteLLM's proxy) and the product's three paths (the API, the
chat page's send + SSE, the chat WebSocket), with the serving process's CPU time per answer. The
profile and history phases reuse the same engine and Daphne (`instant`).

Its part of docs/PERFORMANCE.md: the matrix's targets, the section "The path of one message, beside
the engine and its peers", the peers' row of the machine's table, and the plots ttft.png and
throughput.png.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from bench import load, report
from bench.load import Sample

if TYPE_CHECKING:
    import argparse

    from bench.run import Bench

MODEL = "sim-small"
ANSWER_TOKENS = 64
PRODUCT_PATHS = ("api", "web", "ws")
#: The paths of the matrix, in the order of the doc's tables.
PATHS = {
    "engine": "engine direct",
    "smg": "SGLang Model Gateway (smg)",
    "litellm": "LiteLLM proxy (1 worker)",
    "api": "product: /v1/chat/completions",
    "web": "product: web send + SSE",
    "ws": "product: WebSocket",
}
# (requests, seconds at most) per concurrency level; a level ends at whichever comes first.
FULL_LEVELS = {1: (100, 15), 50: (500, 25), 200: (600, 25), 1000: (1000, 30)}
QUICK_LEVELS = {1: (20, 10), 50: (150, 15), 200: (200, 20), 1000: (1000, 30)}
COLORS = {
    "engine": "#555555",
    "smg": "#8c6bb1",
    "litellm": "#e6550d",
    "api": "#3182bd",
    "web": "#31a354",
    "ws": "#17becf",
}


def levels_for(args: argparse.Namespace) -> dict[int, tuple[int, float]]:
    """The concurrency levels the run measures, each with its (requests, seconds at most)."""
    return {
        c: (QUICK_LEVELS if args.quick else FULL_LEVELS).get(c, (max(c, 100), 30))
        for c in (args.levels or ([1, 50, 200] if args.quick else [1, 50, 200, 1000]))
    }


# -- running it ---------------------------------------------------------------------------------------


def instant(bench: Bench):
    """The engine at instant speed and one Daphne in front of it (started once, on first need)."""
    from bench import procs

    if bench.engine is None:
        bench.engine = bench.start(
            procs.start_engine(
                "instant", ANSWER_TOKENS, "--max-running-requests", "4096", "--max-total-tokens", "4000000"
            )
        )
        bench.results["engines"] = {
            "instant": f"--speed instant, {ANSWER_TOKENS}-token answers, --max-running-requests 4096"
        }
    if bench.daphne is None:
        bench.daphne = bench.start(procs.start_daphne(bench.product_env(bench.engine.url), "instant"))
    return bench.engine, bench.daphne


def run(bench: Bench) -> None:
    engine, daphne = instant(bench)
    targets = {"engine": (engine, engine.url, "")}
    if not bench.args.no_peers:
        targets |= start_peers(bench, engine.url)
    else:
        for name in ("smg", "litellm"):
            bench.results["peers"][name] = {"available": False, "reason": "--no-peers"}
    for name in PRODUCT_PATHS:
        targets[name] = (daphne, daphne.url, "")
    bench.log(f"\nTTFT and throughput ({ANSWER_TOKENS}-token answers; engine at instant speed; Daphne {daphne.url})")
    bench.log(header())
    # The engine first (every "added" needs it), then the product, then the peers: when time
    # runs short, the rows skipped are the peers'.
    order = ["engine", *PRODUCT_PATHS, "smg", "litellm"]
    for concurrency, (total, cap) in bench.levels.items():
        for name in order:
            row_key = f"{name}@{concurrency}"
            if name not in targets:
                continue
            needed = cap + (20 if name in PRODUCT_PATHS else 5)
            if not bench.budget.allows(needed + bench.reserve_after_matrix()):
                bench.results["matrix"][row_key] = {
                    "path": name,
                    "concurrency": concurrency,
                    "skipped": "time budget",
                }
                bench.log(line(PATHS[name], concurrency, bench.results["matrix"][row_key]))
                continue
            process, url, _ = targets[name]
            try:
                row = asyncio.run(level(bench, name, url, process.proc.pid, concurrency, total, cap))
            except Exception as exc:
                row = {"error": bench.failure(exc)}
            row |= {"path": name, "concurrency": concurrency}
            bench.results["matrix"][row_key] = row
            bench.log(line(PATHS[name], concurrency, row))
            if name in PRODUCT_PATHS:
                bench.drain(30)
    for name in ("smg", "litellm"):
        if name in targets:
            bench.stop(targets[name][0])


def start_peers(bench: Bench, engine_url: str) -> dict:
    from bench import procs

    found = {}
    try:
        t = time.perf_counter()
        smg = bench.start(procs.start_smg(engine_url))
        version = subprocess.run(
            [procs.smg_binary(), "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        bench.results["peers"]["smg"] = {
            "available": True,
            "version": version or "sglang-router",
            "policy": "round_robin",
            "start_s": round(time.perf_counter() - t, 1),
        }
        found["smg"] = (smg, smg.url, "")
    except Exception as exc:
        bench.results["peers"]["smg"] = {"available": False, "reason": bench.failure(exc)}
    try:
        t = time.perf_counter()
        version = procs.ensure_litellm(bench.logs / "litellm-install.log")
        proxy = bench.start(procs.start_litellm(engine_url, MODEL, bench.logs / "litellm"))
        bench.results["peers"]["litellm"] = {
            "available": True,
            "version": version,
            "workers": 1,
            "start_s": round(time.perf_counter() - t, 1),
        }
        found["litellm"] = (proxy, proxy.url, "")
    except Exception as exc:
        bench.results["peers"]["litellm"] = {"available": False, "reason": bench.failure(exc)}
    for name in ("smg", "litellm"):
        peer = bench.results["peers"][name]
        bench.log(f"  {name}: " + (f"{peer['version']}" if peer["available"] else f"not measured: {peer['reason']}"))
    return found


async def level(
    bench: Bench,
    name: str,
    url: str,
    pid: int,
    concurrency: int,
    total: int,
    cap: float,
    *,
    answer_tokens: int = ANSWER_TOKENS,
) -> dict:
    import psutil

    from bench import procs

    accounts = bench.accounts["load"]
    sockets: list[load.ChatSocket] = []
    connect_failures: dict[str, int] = {}
    async with load.http_client(bench.timeout) as client:
        if name in ("engine", "smg", "litellm", "api"):

            async def one(slot: int, n: int) -> Sample:
                return await load.openai_stream(
                    client,
                    url,
                    n,
                    model=MODEL,
                    max_tokens=answer_tokens,
                    api_key=accounts[slot].api_key if name == "api" else "",
                )
        elif name == "web":

            async def one(slot: int, n: int) -> Sample:
                return await load.web_turn(client, url, accounts[slot], n)
        else:
            sockets, connect_failures = await open_sockets(url, accounts[:concurrency], bench.timeout, within=30)

            async def one(slot: int, n: int) -> Sample:
                return await sockets[slot].turn(n)

        slots = len(sockets) if name == "ws" else concurrency
        if slots:
            for n in range(3):  # warm-up: connections, caches, first-request work
                await one(0, 10_000_000 + n)
        if bench.sampler:
            bench.sampler.reset()
        me = psutil.Process()
        client_cpu, server_cpu = sum(me.cpu_times()[:2]), procs.cpu_seconds(pid)
        stores_before = procs.store_cpu_seconds()
        rss_before = procs.rss_bytes(pid)
        describe = (lambda slot: sockets[slot].stage) if name == "ws" else None
        run = await load.closed_loop(slots, total, cap, bench.timeout, one, describe) if slots else load.Run()
        server_cpu = procs.cpu_seconds(pid) - server_cpu
        stores = {name: seconds - stores_before[name] for name, seconds in procs.store_cpu_seconds().items()}
        client_cpu = sum(me.cpu_times()[:2]) - client_cpu
        for sock in sockets:
            await sock.close()
    row = report.summarize(run.samples, run.wall, server_cpu_s=server_cpu, client_cpu_s=client_cpu)
    row["stopped_by_time_cap"] = run.stopped_by_cap
    answered = row["ok"]
    for name, seconds in stores.items():
        row[f"{name}_cpu_ms_per_answer"] = round(seconds * 1000 / answered, 2) if answered else None
    row["rss_mb"] = round(max(rss_before, procs.rss_bytes(pid)) / 2**20, 1)
    if connect_failures:
        row["errors"] = {**row["errors"], **connect_failures}
        row["requests"] += sum(connect_failures.values())
    if name in PRODUCT_PATHS and bench.sampler:
        row["pg_connections_peak"] = bench.sampler.peak()
    return row


async def open_sockets(url: str, accounts: list, timeout: float, within: float = 45) -> tuple[list, dict[str, int]]:
    """Open one chat WebSocket per account (50 handshakes at a time, all ``within`` seconds); the failures."""
    gate = asyncio.Semaphore(50)
    failures: dict[str, int] = {}
    deadline = time.perf_counter() + within

    async def one(account):
        sock = load.ChatSocket(url, account)
        async with gate:
            try:
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise TimeoutError(f"not opened within {within:.0f} s")
                await sock.open(min(timeout, left))
                return sock
            except Exception as exc:
                status = getattr(getattr(exc, "response", None), "status_code", None)
                reason = f"ws_connect_{status}" if status else f"ws_connect_{type(exc).__name__}"
                failures[reason] = failures.get(reason, 0) + 1
                return None

    opened = await asyncio.gather(*(one(a) for a in accounts))
    return [s for s in opened if s is not None], failures


# -- the figures and the targets -----------------------------------------------------------------


def added(results: dict, path: str, concurrency: int, q: str) -> float | None:
    """TTFT of ``path`` minus the engine's at the same concurrency (difference of the percentiles)."""
    mine = (results["matrix"].get(f"{path}@{concurrency}") or {}).get("ttft_ms")
    engine = (results["matrix"].get(f"engine@{concurrency}") or {}).get("ttft_ms")
    if not mine or not engine:
        return None
    return round(mine[q] - engine[q], 1)


def targets(results: dict) -> list[dict]:
    """The matrix's rows of the targets table."""
    matrix = results["matrix"]
    out = []
    label = {"api": "API", "web": "web send + SSE", "ws": "WebSocket"}
    for path, limit in (("api", 5), ("web", 10), ("ws", 10)):
        value = added(results, path, 1, "p50")
        out.append(
            report.target(
                f"TTFT added at 1 stream, p50, {label[path]}",
                report.ms(value),
                f"< {limit} ms",
                None if value is None else value < limit,
            )
        )
    for path in PRODUCT_PATHS:
        ttft = (matrix.get(f"{path}@50") or {}).get("ttft_ms")
        out.append(
            report.target(
                f"TTFT at 50 streams, p50 / p99, {label[path]}",
                f"{ttft['p50']:.0f} / {ttft['p99']:.0f} ms" if ttft else "not measured",
                "< 60 / < 150 ms",
                None if not ttft else ttft["p50"] < 60 and ttft["p99"] < 150,
            )
        )
    for path in PRODUCT_PATHS:
        rate = (matrix.get(f"{path}@50") or {}).get("answers_per_s")
        out.append(
            report.target(
                f"answers/s per Daphne process at 50 streams, {label[path]}",
                "not measured" if rate is None else f"{rate:.0f}",
                ">= 150",
                None if rate is None else rate >= 150,
            )
        )
    for concurrency in (200, 1000):
        measured = {
            p: matrix[f"{p}@{concurrency}"]
            for p in PRODUCT_PATHS
            if "http_500" in (matrix.get(f"{p}@{concurrency}") or {})
        }
        missing = [label[p] for p in PRODUCT_PATHS if p not in measured]
        scope = (
            "all product paths"
            if not missing
            else (f"{', '.join(label[p] for p in measured) or 'no path'} measured; {', '.join(missing)} not")
        )
        sent = sum(r["requests"] for r in measured.values())
        fives = sum(r["http_500"] for r in measured.values())
        out.append(
            report.target(
                f"HTTP 500s at {concurrency} streams ({scope})",
                f"{fives} of {sent}" if measured else "not measured",
                "0",
                _met_in_part(fives == 0, measured, missing),
            )
        )
        # Beyond capacity the answer is a 503 with Retry-After: a timeout or a dropped connection is not.
        other: Counter[str] = Counter()
        for r in measured.values():
            other.update({s: n for s, n in r["errors"].items() if s != "503"})
            other["503 without Retry-After"] += r["refusals"]["without_retry_after"]
        other = Counter({s: n for s, n in other.items() if n})
        out.append(
            report.target(
                f"failures other than a 503 with Retry-After at {concurrency} streams ({scope})",
                (f"{sum(other.values())} of {sent}" + (f" ({report.errors(other)})" if other else ""))
                if measured
                else "not measured",
                "0",
                _met_in_part(not other, measured, missing),
            )
        )
    return out


def _met_in_part(ok: bool, measured: dict, missing: list) -> bool | None:
    """Missed if any measured path misses; met only if every path was measured."""
    if not measured:
        return None
    if not ok:
        return False
    return None if missing else True


# -- console text --------------------------------------------------------------------------------


def header() -> str:
    return (
        f"{'path':<34} {'conc':>5} {'ok/req':>11} {'TTFT p50':>9} {'p95':>8} {'p99':>8} "
        f"{'ans/s':>7} {'tok/s':>7} {'cpu ms/ans':>10}  errors"
    )


def line(label: str, concurrency: int, row: dict) -> str:
    if "skipped" in row or "error" in row:
        return f"{label:<34} {concurrency:>5}  {row.get('skipped') or 'failed: ' + row.get('error', '')}"
    ttft = row.get("ttft_ms") or {}
    cpu = row.get("cpu_ms_per_answer")
    return (
        f"{label:<34} {concurrency:>5} {row['ok']:>5}/{row['requests']:<5} {ttft.get('p50', float('nan')):>9.1f} "
        f"{ttft.get('p95', float('nan')):>8.1f} {ttft.get('p99', float('nan')):>8.1f} {row['answers_per_s']:>7.1f} "
        f"{row['tokens_per_s']:>7.0f} {'' if cpu is None else f'{cpu:.1f}':>10}  {report.errors(row['errors'])}"
    )


# -- its part of the doc --------------------------------------------------------------------------


def peers(results: dict) -> str:
    parts = []
    for name, label in (("smg", "smg"), ("litellm", "LiteLLM")):
        peer = results["peers"].get(name) or {}
        if peer.get("available"):
            parts.append(f"{label} {peer.get('version', '')}".strip())
        else:
            parts.append(f"{label}: not measured ({peer.get('reason', 'not run')})")
    return "; ".join(parts)


def _cell(row: dict | None, fn) -> str:
    if not row:
        return "-"
    if "skipped" in row:
        return f"skipped ({row['skipped']})"
    if "error" in row:
        return "failed"
    try:
        return fn(row)
    except (KeyError, TypeError):
        return "-"


def _fmt_errors(row: dict) -> str:
    return report.errors(row["errors"]) or "0"


def _ttft_p50(row: dict) -> str:
    return f"{row['ttft_ms']['p50']:.1f} ms"


def _ttft_p50_p99(row: dict) -> str:
    return f"{row['ttft_ms']['p50']:.0f} / {row['ttft_ms']['p99']:.0f} ms"


def _answers(row: dict) -> str:
    return f"{row['answers_per_s']:.0f}"


def _cpu(row: dict) -> str:
    return "-" if row.get("cpu_ms_per_answer") is None else f"{row['cpu_ms_per_answer']:.1f}"


def _errors_of(row: dict) -> str:
    return f"{_fmt_errors(row)} of {row['requests']}"


def markdown(results: dict, rel: dict[str, Path]) -> list[str]:
    """The section "The path of one message, beside the engine and its peers"."""
    matrix = results["matrix"]
    levels = sorted({row["concurrency"] for row in matrix.values() if "concurrency" in row})
    out = [
        "",
        "## The path of one message, beside the engine and its peers",
        "",
        f"Each stream asks for a {64}-token answer (the engine answers exactly 64 tokens, at `instant` speed: "
        "it charges no time, so what is measured is the serving tier). TTFT is measured by the client: from "
        "sending the request to receiving the first content token (for the web path, from `POST /chat/api/send` "
        "to the first `delta` on the answer's SSE stream; for the WebSocket, from the `send` frame to the "
        "first `delta` frame on a connection opened beforehand). *Added* is the path's percentile minus the "
        "engine's at the same concurrency (so on a busy machine it can come out negative: the noise is "
        "larger than the difference). A level keeps that many streams in flight until its requests are "
        "sent or its time is up; requests still running 10 s after that are cut and count as timeouts. "
        "Daphne runs here with its admission limits out of the way (`ADMISSION_SOFT_LIMIT` and "
        "`ADMISSION_HARD_LIMIT` at 1,000,000), and every user is on a plan whose rate and token limits are "
        "too high to matter; each stream is its own user (session cookie, or API key for the API). The "
        "serving process's CPU time (Daphne's, or the peer's, or the engine's for the direct row) is read "
        "from /proc before and after each level.",
        "",
        "| path | TTFT p50, 1 stream (added) | TTFT p50 / p99, 50 streams | answers/s, 50 streams | "
        "CPU ms per answer, 50 streams | errors, 200 streams | errors, 1,000 streams |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, label in PATHS.items():
        r1, r50 = matrix.get(f"{name}@1"), matrix.get(f"{name}@50")
        r200, r1000 = matrix.get(f"{name}@200"), matrix.get(f"{name}@1000")
        peer = results["peers"].get(name)
        if peer and not peer.get("available"):
            out.append(f"| {label} | not measured: {peer.get('reason', '')} | | | | | |")
            continue
        add = added(results, name, 1, "p50") if name != "engine" else None
        out.append(
            " | ".join(
                [
                    f"| {label}",
                    _cell(r1, _ttft_p50) + (f" (+{add:.1f})" if add is not None else ""),
                    _cell(r50, _ttft_p50_p99),
                    _cell(r50, _answers),
                    _cell(r50, _cpu),
                    _cell(r200, _errors_of),
                    _cell(r1000, _errors_of),
                ]
            )
            + " |"
        )
    out += [
        "",
        "Every level:",
        "",
        "| path | streams | answered / sent | TTFT p50 / p95 / p99 (ms) | added p50 / p99 (ms) | answers/s | "
        "tokens/s | CPU ms per answer | server CPU | client CPU | DB connections | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in levels:
        for name, label in PATHS.items():
            row = matrix.get(f"{name}@{c}")
            if not row:
                continue
            if "skipped" in row or "error" in row:
                out.append(
                    f"| {label} | {c} | {row.get('skipped') or 'failed: ' + row.get('error', '')} | | | | | | | | | |"
                )
                continue
            t = row.get("ttft_ms") or {}
            a50, a99 = added(results, name, c, "p50"), added(results, name, c, "p99")
            out.append(
                f"| {label} | {c} | {row['ok']} / {row['requests']} | "
                f"{t.get('p50', '-')} / {t.get('p95', '-')} / {t.get('p99', '-')} | "
                f"{'-' if name == 'engine' or a50 is None else f'{a50} / {a99}'} | {row['answers_per_s']} | "
                f"{row['tokens_per_s']:.0f} | {_cpu(row)} | "
                f"{row.get('server_cpu_pct', '-')}% | {row.get('client_cpu_pct', '-')}% | "
                f"{row.get('pg_connections_peak', '-') if row.get('pg_connections_peak') is not None else '-'} | "
                f"{_fmt_errors(row)} |"
            )
    examples = {}
    for row in matrix.values():
        for status, text in (row.get("error_examples") or {}).items():
            examples.setdefault(status, text)
    if examples:
        out += ["", "What the errors said (one example each):", ""]
        out += [f"- `{status}`: {text.replace('|', '/')}" for status, text in sorted(examples.items())]
    if "ttft" in rel:
        out += ["", f"![TTFT against concurrency]({rel['ttft'].as_posix()})"]
    if "throughput" in rel:
        out += ["", f"![Answers per second and CPU per answer]({rel['throughput'].as_posix()})"]
    return out


def plots(plt, results: dict, out: Path) -> list[Path]:
    """ttft.png and throughput.png, when a level was measured."""
    matrix = results["matrix"]
    levels = sorted({row["concurrency"] for row in matrix.values() if row.get("ttft_ms")})
    if not levels:
        return []
    written = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, q in zip(axes, ("p50", "p99"), strict=True):
        for name in PATHS:
            points = [
                (c, matrix[f"{name}@{c}"]["ttft_ms"][q])
                for c in levels
                if (matrix.get(f"{name}@{c}") or {}).get("ttft_ms")
            ]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=PATHS[name], color=COLORS.get(name))
        ax.axhline(
            60 if q == "p50" else 150,
            color="red",
            linestyle="--",
            linewidth=1,
            label=f"target at 50 streams ({60 if q == 'p50' else 150} ms)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel(f"TTFT {q} (ms, log)")
        ax.set_title(f"Time to first token, {q}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    written.append(report.save(fig, out / "ttft.png"))

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [n for n in PATHS if any(f"{n}@{c}" in matrix and "answers_per_s" in matrix[f"{n}@{c}"] for c in levels)]
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        xs = [j + i * width for j in range(len(levels))]
        axes[0].bar(
            xs,
            [(matrix.get(f"{name}@{c}") or {}).get("answers_per_s") or 0 for c in levels],
            width,
            label=PATHS[name],
            color=COLORS.get(name),
        )
        axes[1].bar(
            xs,
            [(matrix.get(f"{name}@{c}") or {}).get("cpu_ms_per_answer") or 0 for c in levels],
            width,
            label=PATHS[name],
            color=COLORS.get(name),
        )
    for ax, title in zip(axes, ("answers per second", "CPU ms per answer (the serving process)"), strict=True):
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(levels))], [str(c) for c in levels])
        ax.set_xlabel("concurrent streams")
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    budget = axes[1].axhline(
        1000 / 150, color="red", linestyle="--", linewidth=1, label="6.7 ms: 150 answers/s on one core"
    )
    axes[0].axhline(150, color="red", linestyle="--", linewidth=1, label="target 150/s")
    axes[0].legend(fontsize=8)
    axes[1].legend(handles=[budget], fontsize=8)
    fig.tight_layout()
    written.append(report.save(fig, out / "throughput.png"))
    return written

"""The relay phase of `make bench`: what relaying one answer costs the serving process, by answer length.

`make bench`'s matrix measures 64-token answers; real answers are hundreds of tokens, and the work of
relaying them grows with every token. Here one Daphne process (production settings) relays answers of
64, 256 and 1,024 tokens from the simulated engine at `instant` speed (so the engine charges no time),
50 streams at a time, on the API and on the chat page's send (whose response is the answer's SSE
stream), in three set-ups: the engine's native stream cumulative (SGLang's default: every chunk
carries the whole text so far) or incremental
(`--incremental-streaming-output`: only the new text, the launch line docs/inference.md gives), and
the product asking for a chunk per token (`ENGINE_STREAM_INTERVAL=1`) or per 4 tokens (its default).
The figure is the Daphne process's CPU time (user + system, from the kernel) per answer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bench import matrix, procs, report

if TYPE_CHECKING:
    from bench.run import Bench

LENGTHS = (64, 256, 1024)
#: name -> (the engine's flags, the product's stream interval).
VARIANTS = {
    "cumulative, interval 4": ((), 4),
    "incremental, interval 1": (("--incremental-streaming-output",), 1),
    "incremental, interval 4": (("--incremental-streaming-output",), 4),
}
#: The set-up the targets are read from: the launch line the docs give, and the product's default.
RECOMMENDED = "incremental, interval 4"
PATHS = ("api", "web")
CONCURRENCY = 50
#: (answers, seconds at most) per cell, by answer length.
FULL = {64: (400, 20), 256: (250, 20), 1024: (120, 25)}
QUICK = {64: (200, 12), 256: (120, 12), 1024: (60, 15)}
#: Issue 23's targets for CPU per answer (ms) at one process and 50 streams.
TARGETS = {("api", 64): 5, ("web", 64): 9, ("api", 1024): 20, ("web", 1024): 30}
LABEL = {"api": "API", "web": "web send + SSE"}


def phase_seconds(quick: bool) -> float:
    cells = QUICK if quick else FULL
    per_engine = 15  # starting an engine and a Daphne, warming up, draining
    return sum((cap + 5) * len(PATHS) + per_engine for _, cap in cells.values()) * len(VARIANTS)


def run(bench: Bench) -> None:
    cells = QUICK if bench.args.quick else FULL
    result: dict = {"concurrency": CONCURRENCY, "cells": {}}
    bench.log(f"\nRelay: CPU per answer by answer length ({CONCURRENCY} streams, engine at instant speed)")
    bench.log(f"  {'set-up':<24} {'tokens':>6} {'path':<5} {'answers':>7} {'answers/s':>9} {'CPU ms/answer':>13}")
    for output, (flags, interval) in VARIANTS.items():
        for tokens, (total, cap) in cells.items():
            engine = daphne = None
            try:
                engine = bench.start(
                    procs.start_engine(
                        "instant", tokens, "--max-running-requests", "4096", "--max-total-tokens", "4000000", *flags
                    )
                )
                env = bench.product_env(engine.url) | {"ENGINE_STREAM_INTERVAL": str(interval)}
                daphne = bench.start(procs.start_daphne(env, f"relay-{tokens}"))
                for path in PATHS:
                    key = f"{output}/{tokens}/{path}"
                    try:
                        row = asyncio.run(
                            matrix.level(
                                bench, path, daphne.url, daphne.proc.pid, CONCURRENCY, total, cap, answer_tokens=tokens
                            )
                        )
                    except Exception as exc:
                        row = {"error": bench.failure(exc)}
                    result["cells"][key] = _cell(row)
                    bench.log("  " + line(output, tokens, path, result["cells"][key]))
                    bench.drain(30)
            except Exception as exc:
                result["cells"][f"{output}/{tokens}/start"] = {"error": bench.failure(exc)}
                bench.log(f"  {output} {tokens}: not measured: {bench.failure(exc)}")
            finally:
                for process in (daphne, engine):
                    if process is not None:
                        bench.stop(process)
    bench.results["phases"]["relay"] = result


def _cell(row: dict) -> dict:
    keep = (
        "ok",
        "requests",
        "errors",
        "answers_per_s",
        "cpu_ms_per_answer",
        "postgresql_cpu_ms_per_answer",
        "redis_cpu_ms_per_answer",
        "server_cpu_pct",
        "client_cpu_pct",
    )
    return {k: row[k] for k in keep if k in row} | ({"error": row["error"]} if "error" in row else {})


def line(output: str, tokens: int, path: str, cell: dict) -> str:
    if "error" in cell:
        return f"{output:<24} {tokens:>6} {path:<5} failed: {cell['error']}"
    cpu = cell.get("cpu_ms_per_answer")
    return (
        f"{output:<24} {tokens:>6} {path:<5} {cell.get('ok', 0):>7} {cell.get('answers_per_s', 0):>9.1f} "
        f"{'-' if cpu is None else f'{cpu:.1f}':>13}"
    )


def _cpu(relay: dict, output: str, tokens: int, path: str) -> float | None:
    return ((relay.get("cells") or {}).get(f"{output}/{tokens}/{path}") or {}).get("cpu_ms_per_answer")


def targets(relay: dict) -> list[dict]:
    """Its rows of the targets table: CPU per answer in the recommended set-up, against issue 23's targets."""
    out = []
    for (path, tokens), limit in TARGETS.items():
        figure = _cpu(relay, RECOMMENDED, tokens, path)
        out.append(
            report.target(
                f"CPU per {tokens}-token answer at {CONCURRENCY} streams, {LABEL[path]} ({RECOMMENDED})",
                "not measured" if figure is None else f"{figure:.1f} ms",
                f"<= {limit} ms",
                None if figure is None else figure <= limit,
            )
        )
    return out


def markdown(results: dict, rel: dict) -> list[str]:
    relay = results["phases"].get("relay") or {}
    out = ["", "## Relaying long answers", ""]
    if not relay or "skipped" in relay or ("error" in relay and not relay.get("cells")):
        return [*out, f"Not measured: {relay.get('skipped') or relay.get('error') or 'not run'}."]
    out += [
        f"One Daphne process relays answers of {', '.join(str(n) for n in LENGTHS)} tokens at {CONCURRENCY} streams "
        "from the engine at `instant` speed. The set-up names the engine's native stream, cumulative (SGLang's "
        "default) or incremental (`--incremental-streaming-output`), and the tokens per chunk the product asks "
        "for (`ENGINE_STREAM_INTERVAL`; the first token always comes alone). CPU is the Daphne process's user + "
        "system time per answer, beside PostgreSQL's (every server process) and Redis's; answers/s are bounded "
        "by the machine's two cores, which the engine, the stores and the load generator share.",
        "",
        "| set-up | tokens | path | answers | answers/s | Daphne CPU per answer (ms) | PostgreSQL (ms) | Redis (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for output in VARIANTS:
        for tokens in LENGTHS:
            for path in PATHS:
                cell = (relay.get("cells") or {}).get(f"{output}/{tokens}/{path}")
                if cell is None:
                    continue
                if "error" in cell:
                    out.append(f"| {output} | {tokens} | {LABEL[path]} | failed: {cell['error']} | | | | |")
                    continue
                cpu = cell.get("cpu_ms_per_answer")
                out.append(
                    f"| {output} | {tokens} | {LABEL[path]} | {cell.get('ok', 0)} | {cell.get('answers_per_s', 0):.1f} | "
                    f"{'-' if cpu is None else f'{cpu:.1f}'} | {_ms(cell.get('postgresql_cpu_ms_per_answer'))} | "
                    f"{_ms(cell.get('redis_cpu_ms_per_answer'))} |"
                )
    short, long = LENGTHS[0], LENGTHS[-1]
    marginal = [
        f"{output}, {LABEL[path]}: {per_token:.0f} µs"
        for output in VARIANTS
        for path in PATHS
        if (per_token := token_cost(relay, output, path)) is not None
    ]
    if marginal:
        out += [
            "",
            f"What each token costs beyond the answer's fixed cost, (CPU at {long} tokens - CPU at {short}) / "
            f"{long - short}: " + "; ".join(marginal) + ".",
        ]
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def token_cost(relay: dict, output: str, path: str) -> float | None:
    """Microseconds of CPU per token relayed, beyond what an answer costs whatever its length."""
    short, long = LENGTHS[0], LENGTHS[-1]
    low, high = _cpu(relay, output, short, path), _cpu(relay, output, long, path)
    if low is None or high is None:
        return None
    return (high - low) * 1000 / (long - short)

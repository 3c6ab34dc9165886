"""docs/PERFORMANCE.md and bench/results/: the phases' figures put together.

The page's frame (when and where it ran, the machine, the targets table, the people's analysis, how
to run it again) is here; each section, target row and plot comes from its phase's module. The
order of the sections, of the targets and of the plots is decided here, once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from bench import abuse, history, levers, matrix, overload, profiling, readers, relay, report, retrieval, routing


def targets(results: dict) -> list[dict]:
    """Every phase's rows of the targets table, in the table's order."""
    phases = results["phases"]
    return [
        *matrix.targets(results),
        *relay.targets(phases.get("relay") or {}),
        *overload.targets(phases.get("overload") or {}),
        *readers.targets(phases.get("readers") or {}),
        *history.targets(phases.get("history") or {}),
        abuse.target(phases.get("abuse") or {}),
        *routing.targets(phases.get("routing") or {}),
        *retrieval.targets(phases.get("retrieval") or {}),
        *levers.targets(phases.get("levers") or {}),
    ]


# -- writing ---------------------------------------------------------------------------------------------


def write_all(results: dict, results_dir: Path, doc: Path) -> list[Path]:
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "runs").mkdir(exist_ok=True)
    timeline = results["phases"].get("overload", {}).pop("_timeline", None)
    text = json.dumps(results, indent=1, sort_keys=False, default=str)
    latest = results_dir / "latest.json"
    latest.write_text(text)
    stamp = results["started"].replace(":", "").replace("-", "")
    (results_dir / "runs" / f"{stamp}.json").write_text(text)
    written = [latest]
    for stale in ("ttft", "throughput", "readers", "overload", "routing"):  # a plot this run does not make is gone
        (results_dir / f"{stale}.png").unlink(missing_ok=True)
    try:
        written += plots(results, results_dir, timeline)
    except Exception as exc:  # the figures are still written; the doc shows no plots
        print(f"plots failed: {type(exc).__name__}: {exc}")
    doc.write_text(markdown(results, [p for p in written if p.suffix == ".png"], doc.parent))
    written.append(doc)
    return written


def update_sections(results: dict, phases: list[str], results_dir: Path, doc: Path) -> list[Path]:
    """After `python -m bench.run --phases ... --sections-only`: those phases of latest.json replaced (each
    stamped with when and at which commit it ran), targets recomputed, and docs/PERFORMANCE.md written
    again from it (the other phases' figures and plots as the last full run left them)."""
    latest = results_dir / "latest.json"
    merged = json.loads(latest.read_text()) if latest.exists() else {**results, "phases": {}}
    for name in phases:
        merged["phases"][name] = results["phases"][name] | {
            "run": {
                "started": results["started"],
                "commit": results.get("commit"),
                "quick": results["quick"],
                "loadavg": results.get("machine", {}).get("loadavg_at_end"),
                "note": results.get("note", ""),
            }
        }
    return _write_again(merged, results_dir, doc)


def update_routing_section(routing: dict, results_dir: Path, doc: Path) -> list[Path]:
    """After `python -m bench.routing` on its own: the routing phase of latest.json replaced, targets recomputed,
    and docs/PERFORMANCE.md written again from it (the other phases' figures and plots as they were)."""
    latest = results_dir / "latest.json"
    if latest.exists():
        results = json.loads(latest.read_text())
    else:
        results = {
            "started": routing["started"],
            "quick": routing["quick"],
            "note": "",
            "matrix": {},
            "peers": {},
            "phases": {},
            "machine": routing.get("machine", {}),
        }
    results["phases"]["routing"] = routing
    return _write_again(results, results_dir, doc)


def _write_again(results: dict, results_dir: Path, doc: Path) -> list[Path]:
    """Targets recomputed, latest.json and the page written from ``results``, with the plots already there."""
    results["targets"] = targets(results)
    latest = results_dir / "latest.json"
    latest.write_text(json.dumps(results, indent=1, sort_keys=False, default=str))
    pngs = sorted(p.resolve() for p in results_dir.glob("*.png"))
    doc.write_text(markdown(results, pngs, doc.resolve().parent))
    return [latest, doc]


def plots(results: dict, out: Path, timeline) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = matrix.plots(plt, results, out)
    for png in (
        readers.plot(plt, results["phases"].get("readers") or {}, out),
        routing.plot(results["phases"].get("routing") or {}, out),
        overload.plot(plt, timeline, out),
    ):
        if png:
            written.append(png)
    plt.close("all")
    return written


# -- the page ----------------------------------------------------------------------------------------------


def markdown(results: dict, pngs: Iterable[Path], doc_dir: Path) -> str:
    m = results.get("machine", {})
    started = datetime.fromisoformat(results["started"])
    rel = {p.stem: Path("..") / p.relative_to(doc_dir.parent) for p in pngs}
    out = [
        "# Performance",
        "",
        f"Written by `make bench` (`python -m bench.run`{' --quick' if results['quick'] else ''}) on "
        f"{started:%Y-%m-%d %H:%M} UTC at commit {results.get('commit', '?')}, in {results.get('elapsed_s', 0):.0f} s. "
        "Do not edit by hand: run it again. The raw figures are in "
        "[`bench/results/latest.json`](../bench/results/latest.json).",
        "",
        "## The machine and the conditions",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m.get('cpu', '?')}, {m.get('cores', '?')} cores |",
        f"| memory | {m.get('memory_gib', '?')} GiB |",
        f"| system | {m.get('os', '?')}, Python {m.get('python', '?')} |",
        f"| stores | PostgreSQL {m.get('postgresql', '?')}, Redis {m.get('redis', '?')} (on the same machine) |",
        f"| database connections | the product may hold {(results.get('database') or {}).get('connections_allowed', '?')} "
        f"(a role limit: the server's {m.get('postgresql_max_connections', '?')} are shared with other work) |",
        f"| product | Django {m.get('django', '?')}, Daphne {m.get('daphne', '?')}: one process, "
        "`DJANGO_PROFILE=production`, DEBUG off |",
        f"| peers | {matrix.peers(results)} |",
        f"| load average (1, 5, 15 min) | {m.get('loadavg_at_start')} at the start, {m.get('loadavg_at_end')} at the end |",
    ]
    if results.get("note"):
        out.append(f"| note | {results['note']} |")
    out += [
        "",
        "Everything runs on this one machine: the engine, the peers, Daphne, PostgreSQL, Redis and the load "
        "generator (one asyncio process) share its cores, so the figures are what one process does with "
        "what is left, and the client's own CPU share is shown beside each row.",
        "",
        "## Targets",
        "",
        "| what | measured | target | |",
        "|---|---|---|---|",
    ]
    out += [f"| {t['name']} | {t['figure']} | {t['target']} | {report.mark(t['met'])} |" for t in results["targets"]]
    analysis = Path(__file__).with_name("ANALYSIS.md")
    if analysis.exists():  # written by people, kept beside the bench: why targets are missed, what would reach them
        out += ["", analysis.read_text().strip()]
    out += (
        matrix.markdown(results, rel)
        + relay.markdown(results, rel)
        + readers.markdown(results, rel)
        + overload.markdown(results, rel)
        + abuse.markdown(results, rel)
        + routing.markdown(results, rel)
        + retrieval.markdown(results, rel)
        + levers.markdown(results)
        + history.markdown(results, rel)
        + profiling.markdown(results, rel)
    )
    out += [
        "",
        "## Running it",
        "",
        "```sh",
        "make bench                          # about 20-25 minutes; writes bench/results/ and this file",
        'make bench BENCH_ARGS="--quick"     # fewer requests, levels 1, 50 and 200: to iterate',
        "```",
        "",
        "`.venv/bin/python -m bench.run --help` lists the options (`--levels`, `--no-peers`, `--phases`, `--note`, "
        "`--budget-minutes`); the bench runs as modules from the checkout's root, which `python -m` puts on the "
        "path for the process harness it shares with the tests (`harness/`, not installed). It uses its own PostgreSQL database (`sglchat_bench`, dropped and created anew) "
        "and Redis database 9 (flushed), never the tests' data; it starts the simulated engines, one Daphne "
        "process at a time, `smg` (from the `router` extra) and LiteLLM's proxy, which it installs into "
        "`bench/.peers/` on first use (git-ignored). A phase that fails or runs out of time says so in its "
        "row; logs are in `bench/results/logs/`.",
        "",
        "The routing phase is `bench/routing.py`, run by `make bench` in its own process; it also runs on its own "
        "(`.venv/bin/python -m bench.routing [--quick]`, about 6 minutes, 2 with `--quick`; it needs neither "
        "PostgreSQL nor Redis) and then rewrites only its own section of this file and its own figures in "
        "`latest.json`.",
        "",
        "The retrieval phase is `bench/retrieval.py`; on its own (`.venv/bin/python -m bench.retrieval [--quick] "
        "--doc`, about 25 minutes at 100,000 passages, 6 with `--quick`; it starts its own pgvector server and "
        "simulated embedding worker, and needs neither the bench's PostgreSQL nor Redis) it rewrites only its own "
        "section of this file and its figures in `latest.json`.",
        "",
        "Any other phase can be measured again on its own the same way: `.venv/bin/python -m bench.run --phases abuse "
        "--sections-only [--quick]` (about a minute) replaces only that section and its figures in `latest.json`.",
        "",
    ]
    return "\n".join(out)

"""`make bench`: the web tier measured against the engine and its peers, in one run on one machine.

    .venv/bin/python -m bench.run [--quick] [--no-peers] [--levels 1 50 200 1000] [--note "..."]

Starts what it needs (PostgreSQL and Redis are started by `make bench`; the bench uses its own
database, dropped and created anew, and its own Redis database, flushed), then:

1. time to first token (TTFT) and throughput at 1, 50, 200 and 1,000 concurrent streams through the
   engine directly, the SGLang Model Gateway (smg), LiteLLM's proxy, and the product's three paths
   (the OpenAI-compatible API, the chat page's send + SSE, the chat WebSocket), one Daphne process,
   with Daphne's CPU time per answer;
2. a py-spy profile of the 50-stream web run;
3. history at scale: sidebar and conversation load with 10,000 conversations and 2,000 messages;
4. overload: 3x capacity, half free, half premium, then a check that nothing accepted was lost;
5. abuse: one Plus user hammering send over the web, WebSockets and the API at once; the others' TTFT
   against the same load without them, and the abuser's accepted and refused against the plan
   (bench/abuse.py);
6. the most open SSE readers one process holds, and its memory per reader;
7. routing across nodes (bench/routing.py, in its own process): one multi-turn chat workload against
   three simulated workers with each of the product's routing policies and through smg's, beside
   the ideal (one worker with the cache of all three): prefix-cache hit rate, TTFT and throughput.
8. retrieval (bench/retrieval.py, each store in its own process): the search index at 100,000
   generated passages on real pgvector and on SQLite with sqlite-vec: passages indexed per second,
   query latency p50/p99, recall@5 of vector only, full text only and hybrid on labelled questions.
9. levers (bench/levers.py): a mixed workload replayed through the API with no lever, the response
   cache, the semantic cache, Auto and all three: engine tokens and GPU-seconds avoided, hits, the
   small model's share, cross-tenant hits, and wrong hits on labelled near misses.

Each phase is one module that runs it and renders its part of the results (its targets, console
text, plots and section of the doc): bench/matrix.py, profiling.py, history.py, overload.py,
abuse.py, readers.py, routing.py, retrieval.py and levers.py. This file sets up what they share (the database and its users,
the product's environment, the processes started, the time budget) and runs them in turn;
bench/doc.py puts their figures together.

Prints each table as it goes, then writes bench/results/latest.json (and a copy under runs/), PNG
plots in bench/results/, and docs/PERFORMANCE.md. A phase that fails says so in its row and the run
goes on. Figures depend on the machine and on what else runs on it: see the note in the doc.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

from bench import (
    abuse,
    doc,
    history,
    levers,
    matrix,
    overload,
    procs,
    profiling,
    readers,
    relay,
    report,
    retrieval,
    routing,
)

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "bench" / "results"
LOGS = RESULTS / "logs"
DOC = ROOT / "docs" / "PERFORMANCE.md"

PHASES = ("matrix", "relay", "profile", "history", "overload", "abuse", "readers", "routing", "retrieval", "levers")


class Budget:
    """The run's time limit: later phases are skipped (and say so) rather than overrun it."""

    def __init__(self, minutes: float) -> None:
        self.started = time.monotonic()
        self.limit = minutes * 60

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.limit - self.elapsed()

    def allows(self, seconds: float) -> bool:
        return self.left() >= seconds


class Bench:
    """What the phases share: the options, the time budget, the users, the processes started (stopped
    at the end, whatever happens), the matrix's engine and Daphne, and the results so far."""

    root = ROOT
    logs = LOGS

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.budget = Budget(args.budget_minutes)
        self.levels = matrix.levels_for(args)
        self.timeout = 30.0 if args.quick else 60.0
        self.secret = secrets.token_urlsafe(48)
        self.results: dict = {
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "quick": args.quick,
            "note": args.note,
            "targets": {},
            "matrix": {},
            "peers": {},
            "phases": {},
            "phase_seconds": {},
        }
        self.processes: list = []
        self.engine = self.daphne = None
        self.database_url = ""
        self.sampler = None
        self.accounts = {}

    # -- environment ----------------------------------------------------------------------------

    def product_env(self, engine_url: str, *, admission_raised: bool = True) -> dict[str, str]:
        """What Daphne (and this process's Django) run with: production settings, DEBUG off."""
        env = {
            "DJANGO_PROFILE": "production",
            "DEBUG": "false",
            "SECRET_KEY": self.secret,
            "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
            "SECURE_SSL_REDIRECT": "false",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.args.redis_url,
            "SGLANG_URL": engine_url,
            "SGLANG_SIMULATED": "true",
            # The benchmark's users get their plans as development subscriptions (bench/data.py): a demo,
            # which production accepts only when declared.
            "PAYMENT_PROVIDER": "dev",
            "PAYMENT_PROVIDER_DEV_IN_PRODUCTION": "demo",
            "PYTHONUNBUFFERED": "1",
            # Every phase measures the work of answering; the levels and set-ups ask the same questions
            # again, which the response cache would answer without the engine.
            "RESPONSE_CACHE_ENABLED": "false",
        }
        if admission_raised:
            env |= {"ADMISSION_SOFT_LIMIT": "1000000", "ADMISSION_HARD_LIMIT": "1000000", "WEB_MAX_LOOP_LAG_MS": "0"}
        return env

    def start(self, process):
        self.processes.append(process)
        return process

    def stop(self, process) -> None:
        if process is None:
            return
        procs.keep_log(process, LOGS)
        process.stop()
        with contextlib.suppress(ValueError):
            self.processes.remove(process)

    def log(self, text: str = "") -> None:
        print(text, flush=True)

    def failure(self, exc: BaseException) -> str:
        """One line for the row; the traceback goes to the run's log."""
        with (LOGS / "errors.log").open("a") as out:
            out.write(f"--- {datetime.now(UTC).isoformat()}\n{traceback.format_exc()}\n")
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    # -- set-up ---------------------------------------------------------------------------------

    def setup(self) -> None:
        from bench import data

        self.log(
            f"bench database {data.database_name(self.args.database_url)}, Redis {self.args.redis_url} "
            "(both wiped and filled anew)"
        )
        data.check_safe(self.args.database_url, self.args.redis_url)
        self.database_url = data.reset_database(self.args.database_url, self.args.db_connections)
        self.results["database"] = {"connections_allowed": self.args.db_connections}
        data.flush_redis(self.args.redis_url)
        # Not raised here: this process reads the product's own admission defaults from its settings.
        data.configure(
            self.product_env("http://127.0.0.1:9", admission_raised=False)
            | {"DATABASE_URL": data.driver_url(self.args.database_url)}
        )
        data.migrate()
        data.create_plans()
        top = max(self.levels)
        t = time.perf_counter()
        self.accounts["load"] = data.create_accounts("load", top, "bench-premium")
        self.accounts["premium"] = data.create_accounts("premium", 100, "bench-premium", api_keys=False)
        self.accounts["free"] = data.create_accounts("free", 100, "bench-free", api_keys=False)
        self.accounts["readers"] = data.create_accounts(
            "owner", self.args.reader_messages, "bench-premium", api_keys=False
        )
        self.log(
            f"  {sum(len(a) for a in self.accounts.values())} users with sessions and API keys in "
            f"{time.perf_counter() - t:.1f} s"
        )
        self.results["machine"] = procs.machine() | data.versions()
        self.results["commit"] = git_commit()
        self.sampler = procs.Sampler(self.args.database_url, data.database_name(self.args.database_url)).start()

    # -- what more than one phase uses ----------------------------------------------------------

    def drain(self, timeout: float) -> None:
        """Let the answers of the last level end before the next starts."""
        from bench import data

        try:
            drained, left = data.wait_drained(timeout)
        except Exception as exc:
            self.log(f"  (could not count the answers still generating: {self.failure(exc)})")
            return
        if not drained:
            self.log(f"  ({left} answers still pending or streaming; none ended in the last 5 s)")

    def reserve_after_matrix(self) -> float:
        """Seconds kept for the phases after the matrix."""
        later = {
            "relay": relay.phase_seconds(self.args.quick),
            "profile": 30,
            "history": 40,
            "overload": 125,
            "readers": 90,
            "routing": routing.phase_seconds(self.args.quick),
            "retrieval": retrieval.phase_seconds(self.args.quick),
            "levers": levers.phase_seconds(self.args.quick),
        }
        return sum(seconds for name, seconds in later.items() if name in self.args.phases)

    # -- the whole run --------------------------------------------------------------------------------

    def run(self) -> int:
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / "errors.log").unlink(missing_ok=True)
        self.log(
            f"make bench{' --quick' if self.args.quick else ''}: results in {RESULTS.relative_to(ROOT)}/, "
            f"doc in docs/PERFORMANCE.md; time budget {self.args.budget_minutes:.0f} min"
        )
        try:
            self.setup()
        except Exception as exc:
            self.log(f"Set-up failed, nothing measured: {self.failure(exc)} (see {LOGS.relative_to(ROOT)}/errors.log)")
            self.cleanup()
            return 1
        phases = [
            ("matrix", matrix.run, 0),
            ("relay", relay.run, relay.phase_seconds(self.args.quick)),
            ("profile", profiling.run, 30),
            ("history", history.run, 40),
            ("overload", overload.run, 115),
            ("abuse", abuse.run, 45 if self.args.quick else 75),
            ("readers", readers.run, 60),
            ("routing", routing.run, routing.phase_seconds(self.args.quick)),
            ("retrieval", retrieval.run, retrieval.phase_seconds(self.args.quick)),
            ("levers", levers.run, levers.phase_seconds(self.args.quick)),
        ]
        for name, phase, needed in phases:
            if name not in self.args.phases:
                continue
            if not self.budget.allows(needed):
                self.results["phases"][name] = {"skipped": f"time budget ({self.budget.left():.0f} s left)"}
                self.log(f"\n{name}: skipped, time budget")
                continue
            if name in ("overload", "abuse", "readers", "routing", "retrieval", "levers") and self.daphne is not None:
                self.stop(self.daphne)  # one Daphne at a time
                self.daphne = None
            began = time.monotonic()
            try:
                phase(self)
            except Exception as exc:
                self.results["phases"].setdefault(name, {})["error"] = self.failure(exc)
                self.log(f"{name}: failed: {self.results['phases'][name]['error']}")
            self.results["phase_seconds"][name] = round(time.monotonic() - began)
        self.results["elapsed_s"] = round(self.budget.elapsed(), 0)
        self.results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        self.cleanup()
        if self.args.sections_only:
            run = [name for name in self.args.phases if name in self.results["phases"]]
            paths = doc.update_sections(self.results, run, RESULTS, DOC)
            self.log(f"\nWrote {', '.join(str(p.relative_to(ROOT)) for p in paths)} (the sections of {', '.join(run)})")
            return 0
        self.results["targets"] = doc.targets(self.results)
        paths = doc.write_all(self.results, RESULTS, DOC)
        self.log(report.targets_text(self.results["targets"]))
        self.log(
            f"\nWrote {', '.join(str(p.relative_to(ROOT)) for p in paths)} in {self.results['elapsed_s']:.0f} s "
            f"(seconds per phase: {self.results['phase_seconds']})"
        )
        return 0

    def cleanup(self) -> None:
        if self.sampler:
            self.sampler.stop()
        for process in list(self.processes):
            self.stop(process)


def git_commit() -> str:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    return head + (" (with uncommitted changes)" if dirty else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer requests and levels (1, 50, 200), to iterate")
    parser.add_argument("--levels", type=int, nargs="+", help="concurrency levels (default 1 50 200 1000)")
    parser.add_argument("--no-peers", action="store_true", help="skip smg and LiteLLM (and smg's routing rows)")
    parser.add_argument(
        "--phases",
        nargs="+",
        default=list(PHASES),
        choices=PHASES,
        help="which phases to run (default: all, in this order)",
    )
    parser.add_argument(
        "--sections-only",
        action="store_true",
        help="replace only the phases run (not the matrix) in latest.json and docs/PERFORMANCE.md, keeping the "
        "rest as the last full run wrote it (e.g. --phases abuse --sections-only)",
    )
    parser.add_argument("--note", default="", help="a sentence on the conditions, printed in the doc")
    parser.add_argument("--budget-minutes", type=float, default=34.0, help="skip later phases past this")
    parser.add_argument(
        "--overload-rate",
        type=float,
        default=None,
        help="sends/s offered in the overload phase (default: 3 x the web path's peak, measured in the phase)",
    )
    parser.add_argument("--reader-messages", type=int, default=20, help="answers the SSE readers follow")
    parser.add_argument(
        "--database-url",
        default="postgres://postgres@127.0.0.1:5432/sglchat_bench",
        help="the bench's own database, as a superuser who may drop and create it",
    )
    parser.add_argument(
        "--db-connections",
        type=int,
        default=50,
        help="connections the product may hold to it (the PostgreSQL server is shared)",
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9", help="the bench's own Redis database")
    args = parser.parse_args()
    bench = Bench(args)
    try:
        return bench.run()
    except KeyboardInterrupt:
        bench.cleanup()
        return 130


if __name__ == "__main__":
    sys.exit(main())

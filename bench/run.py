"""`make bench`: the web tier measured against the engine and its peers, in one run on one machine.

    .venv/bin/python bench/run.py [--quick] [--no-peers] [--levels 1 50 200 1000] [--note "..."]

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

Prints each table as it goes, then writes bench/results/latest.json (and a copy under runs/), PNG
plots in bench/results/, and docs/PERFORMANCE.md. A phase that fails says so in its row and the run
goes on. Figures depend on the machine and on what else runs on it: see the note in the doc.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import subprocess
import sys
import time
import traceback
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from bench import abuse, load, procs, report  # noqa: E402
from bench.load import Sample  # noqa: E402
from bench.report import PATHS  # noqa: E402

RESULTS = ROOT / "bench" / "results"
LOGS = RESULTS / "logs"
MODEL = "sim-small"
ANSWER_TOKENS = 64

PRODUCT_PATHS = ("api", "web", "ws")
PHASES = ("matrix", "profile", "history", "overload", "abuse", "readers", "routing")
# (requests, seconds at most) per concurrency level; a level ends at whichever comes first.
FULL_LEVELS = {1: (100, 15), 50: (500, 25), 200: (600, 25), 1000: (1000, 30)}
QUICK_LEVELS = {1: (20, 10), 50: (150, 15), 200: (200, 20), 1000: (1000, 30)}


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


def log(text: str = "") -> None:
    print(text, flush=True)


def failure(exc: BaseException) -> str:
    """One line for the row; the traceback goes to the run's log."""
    with (LOGS / "errors.log").open("a") as out:
        out.write(f"--- {datetime.now(UTC).isoformat()}\n{traceback.format_exc()}\n")
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.budget = Budget(args.budget_minutes)
        self.levels = {
            c: (QUICK_LEVELS if args.quick else FULL_LEVELS).get(c, (max(c, 100), 30))
            for c in (args.levels or ([1, 50, 200] if args.quick else [1, 50, 200, 1000]))
        }
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

    # -- set-up ---------------------------------------------------------------------------------

    def setup(self) -> None:
        from bench import data

        log(
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
        log(
            f"  {sum(len(a) for a in self.accounts.values())} users with sessions and API keys in "
            f"{time.perf_counter() - t:.1f} s"
        )
        self.results["machine"] = procs.machine() | data.versions()
        self.results["commit"] = git_commit()
        self.sampler = procs.Sampler(self.args.database_url, data.database_name(self.args.database_url)).start()

    # -- 1. the matrix --------------------------------------------------------------------------------

    def instant(self):
        """The engine at instant speed and one Daphne in front of it (started once, on first need)."""
        if self.engine is None:
            self.engine = self.start(
                procs.start_engine(
                    "instant", ANSWER_TOKENS, "--max-running-requests", "4096", "--max-total-tokens", "4000000"
                )
            )
            self.results["engines"] = {
                "instant": f"--speed instant, {ANSWER_TOKENS}-token answers, --max-running-requests 4096"
            }
        if self.daphne is None:
            self.daphne = self.start(procs.start_daphne(self.product_env(self.engine.url), "instant"))
        return self.engine, self.daphne

    def matrix(self) -> None:
        engine, daphne = self.instant()
        targets = {"engine": (engine, engine.url, "")}
        if not self.args.no_peers:
            targets |= self.start_peers(engine.url)
        else:
            for name in ("smg", "litellm"):
                self.results["peers"][name] = {"available": False, "reason": "--no-peers"}
        for name in PRODUCT_PATHS:
            targets[name] = (daphne, daphne.url, "")
        log(f"\nTTFT and throughput ({ANSWER_TOKENS}-token answers; engine at instant speed; Daphne {daphne.url})")
        log(report.matrix_header())
        # The engine first (every "added" needs it), then the product, then the peers: when time
        # runs short, the rows skipped are the peers'.
        order = ["engine", *PRODUCT_PATHS, "smg", "litellm"]
        for concurrency, (total, cap) in self.levels.items():
            for name in order:
                row_key = f"{name}@{concurrency}"
                if name not in targets:
                    continue
                needed = cap + (20 if name in PRODUCT_PATHS else 5)
                if not self.budget.allows(needed + self.reserve_after_matrix()):
                    self.results["matrix"][row_key] = {
                        "path": name,
                        "concurrency": concurrency,
                        "skipped": "time budget",
                    }
                    log(report.matrix_line(PATHS[name], concurrency, self.results["matrix"][row_key]))
                    continue
                process, url, _ = targets[name]
                try:
                    row = asyncio.run(self.level(name, url, process.proc.pid, concurrency, total, cap))
                except Exception as exc:
                    row = {"error": failure(exc)}
                row |= {"path": name, "concurrency": concurrency}
                self.results["matrix"][row_key] = row
                log(report.matrix_line(PATHS[name], concurrency, row))
                if name in PRODUCT_PATHS:
                    self.drain(30)
        for name in ("smg", "litellm"):
            if name in targets:
                self.stop(targets[name][0])

    def reserve_after_matrix(self) -> float:
        """Seconds kept for the phases after the matrix."""
        later = {"profile": 30, "history": 40, "overload": 110, "readers": 90, "routing": self.routing_seconds()}
        return sum(seconds for name, seconds in later.items() if name in self.args.phases)

    def start_peers(self, engine_url: str) -> dict:
        found = {}
        try:
            t = time.perf_counter()
            smg = self.start(procs.start_smg(engine_url))
            version = subprocess.run(
                [procs.smg_binary(), "--version"], capture_output=True, text=True, check=False
            ).stdout.strip()
            self.results["peers"]["smg"] = {
                "available": True,
                "version": version or "sglang-router",
                "policy": "round_robin",
                "start_s": round(time.perf_counter() - t, 1),
            }
            found["smg"] = (smg, smg.url, "")
        except Exception as exc:
            self.results["peers"]["smg"] = {"available": False, "reason": failure(exc)}
        try:
            t = time.perf_counter()
            version = procs.ensure_litellm(LOGS / "litellm-install.log")
            proxy = self.start(procs.start_litellm(engine_url, MODEL, LOGS / "litellm"))
            self.results["peers"]["litellm"] = {
                "available": True,
                "version": version,
                "workers": 1,
                "start_s": round(time.perf_counter() - t, 1),
            }
            found["litellm"] = (proxy, proxy.url, "")
        except Exception as exc:
            self.results["peers"]["litellm"] = {"available": False, "reason": failure(exc)}
        for name in ("smg", "litellm"):
            peer = self.results["peers"][name]
            log(f"  {name}: " + (f"{peer['version']}" if peer["available"] else f"not measured: {peer['reason']}"))
        return found

    async def level(self, name: str, url: str, pid: int, concurrency: int, total: int, cap: float) -> dict:
        accounts = self.accounts["load"]
        sockets: list[load.ChatSocket] = []
        connect_failures: dict[str, int] = {}
        async with load.http_client(self.timeout) as client:
            if name in ("engine", "smg", "litellm", "api"):

                async def one(slot: int, n: int) -> Sample:
                    return await load.openai_stream(
                        client,
                        url,
                        n,
                        model=MODEL,
                        max_tokens=ANSWER_TOKENS,
                        api_key=accounts[slot].api_key if name == "api" else "",
                    )
            elif name == "web":

                async def one(slot: int, n: int) -> Sample:
                    return await load.web_turn(client, url, accounts[slot], n)
            else:
                sockets, connect_failures = await open_sockets(url, accounts[:concurrency], self.timeout, within=30)

                async def one(slot: int, n: int) -> Sample:
                    return await sockets[slot].turn(n)

            slots = len(sockets) if name == "ws" else concurrency
            if slots:
                for n in range(3):  # warm-up: connections, caches, first-request work
                    await one(0, 10_000_000 + n)
            if self.sampler:
                self.sampler.reset()
            me = psutil.Process()
            client_cpu, server_cpu = sum(me.cpu_times()[:2]), procs.cpu_seconds(pid)
            rss_before = procs.rss_bytes(pid)
            describe = (lambda slot: sockets[slot].stage) if name == "ws" else None
            run = await load.closed_loop(slots, total, cap, self.timeout, one, describe) if slots else load.Run()
            server_cpu = procs.cpu_seconds(pid) - server_cpu
            client_cpu = sum(me.cpu_times()[:2]) - client_cpu
            for sock in sockets:
                await sock.close()
        row = report.summarize(run.samples, run.wall, server_cpu_s=server_cpu, client_cpu_s=client_cpu)
        row["stopped_by_time_cap"] = run.stopped_by_cap
        row["rss_mb"] = round(max(rss_before, procs.rss_bytes(pid)) / 2**20, 1)
        if connect_failures:
            row["errors"] = {**row["errors"], **connect_failures}
            row["requests"] += sum(connect_failures.values())
        if name in PRODUCT_PATHS and self.sampler:
            row["pg_connections_peak"] = self.sampler.peak()
        return row

    def drain(self, timeout: float) -> None:
        """Let the answers of the last level end before the next starts."""
        from bench import data

        try:
            drained, left = data.wait_drained(timeout)
        except Exception as exc:
            log(f"  (could not count the answers still generating: {failure(exc)})")
            return
        if not drained:
            log(f"  ({left} answers still pending or streaming; none ended in the last 5 s)")

    # -- 2. profile -----------------------------------------------------------------------------------

    def profile(self) -> None:
        self.instant()
        seconds = 10 if self.args.quick else 15
        out = LOGS / "profile-web-50.txt"
        spy = [
            str(Path(sys.executable).with_name("py-spy")),
            "record",
            "--pid",
            str(self.daphne.proc.pid),
            "--duration",
            str(seconds),
            "--rate",
            "100",
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(out),
        ]
        result = {"path": "web", "concurrency": 50, "seconds": seconds, "tool": "py-spy 100 Hz, --nonblocking"}
        try:
            out.unlink(missing_ok=True)
            recorder = subprocess.Popen(spy, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(1)
            run = asyncio.run(self.profiled_load(seconds + 1))
            output, _ = recorder.communicate(timeout=60)
            if recorder.returncode != 0 or not out.exists():
                raise RuntimeError(f"py-spy failed ({recorder.returncode}): {output.strip()[-300:]}")
            result |= report.top_frames(out.read_text(), seconds=seconds, rate=100)
            result["answers"] = sum(1 for s in run.samples if s.ok)
            result["raw"] = str(out.relative_to(ROOT))
        except Exception as exc:
            result["error"] = failure(exc)
        self.results["phases"]["profile"] = result
        log(report.profile_text(result))
        self.drain(30)

    async def profiled_load(self, seconds: float) -> load.Run:
        accounts = self.accounts["load"]
        async with load.http_client(self.timeout) as client:
            return await load.closed_loop(
                min(50, len(accounts)),
                10**9,
                seconds,
                self.timeout,
                lambda slot, n: load.web_turn(client, self.daphne.url, accounts[slot], n),
            )

    # -- 3. history at scale -----------------------------------------------------------------------

    def history(self) -> None:
        from bench import data

        conversations, messages = (2000, 500) if self.args.quick else (10_000, 2000)
        reps = 20 if self.args.quick else 50
        self.instant()
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
            timings = asyncio.run(self.history_timings(big, big_id, small, small_id, reps))
            result |= timings
            result["queries"] = {"large": data.query_counts(big, big_id), "small": data.query_counts(small, small_id)}
        except Exception as exc:
            result["error"] = failure(exc)
        self.results["phases"]["history"] = result
        log(report.history_text(result))

    async def history_timings(self, big, big_id, small, small_id, reps: int) -> dict:
        out = {}
        async with load.http_client(self.timeout) as client:
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
                        response = await client.get(f"{self.daphne.url}{path}", headers={"Cookie": account.cookie})
                        times.append(time.perf_counter() - started)
                        statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1
                        size = len(response.content)
                    times = times[2:]  # the first two warm caches and connections
                    out[f"{label}_{page}"] = {"ms": report.percentiles(times), "statuses": statuses, "bytes": size}
        return out

    # -- 4. overload ----------------------------------------------------------------------------------

    def overload(self) -> None:
        from bench import data

        seconds = 8 if self.args.quick else 15
        result: dict = {"seconds": seconds}
        engine = daphne = None
        try:
            engine = self.start(procs.start_engine("realistic", ANSWER_TOKENS, "--max-running-requests", "256"))
            daphne = self.start(procs.start_daphne(self.product_env(engine.url, admission_raised=False), "overload"))
            web = self.results["matrix"].get("web@50", {})
            capacity, source = (
                (web["answers_per_s"], "web@50 of this run")
                if web.get("answers_per_s")
                else (self.args.capacity, "--capacity")
            )
            rate = self.args.overload_rate or 3 * capacity
            count = min(int(rate * seconds), 6000)
            result |= {
                "engine": f"--speed realistic, {ANSWER_TOKENS}-token answers, --max-running-requests 256",
                "admission": data.admission_limits(),
                "capacity_answers_per_s": round(capacity, 1),
                "capacity_from": source if not self.args.overload_rate else "--overload-rate",
                "offered_per_s": round(rate, 1),
                "requests": count,
            }
            result |= asyncio.run(self.overload_load(daphne.url, rate, count))
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
            result["error"] = failure(exc)
        finally:
            self.stop(daphne)
            self.stop(engine)
        self.results["phases"]["overload"] = result
        log(report.overload_text(result))

    async def overload_load(self, url: str, rate: float, count: int) -> dict:
        premium, free = self.accounts["premium"], self.accounts["free"]
        out = {}
        async with load.http_client(self.timeout) as client:
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

            run = await load.open_loop(rate, count, self.timeout, seed=7, one=one, kind=kind)
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

    # -- 5. abuse --------------------------------------------------------------------------------------

    def abuse(self) -> None:
        try:
            result = abuse.run_phase(
                start=self.start,
                stop=self.stop,
                product_env=self.product_env,
                others=self.accounts["premium"][-abuse.OTHERS :],
                quick=self.args.quick,
            )
        except Exception as exc:
            result = {"error": failure(exc)}
        self.results["phases"]["abuse"] = result
        log(report.abuse_text(result))

    # -- 6. open SSE readers ----------------------------------------------------------------------------

    def readers(self) -> None:

        steps = [100, 250, 500] if self.args.quick else [250, 500, 1000, 1500, 2000, 2500]
        result: dict = {"target": 2000, "steps": [], "messages": self.args.reader_messages}
        engine = daphne = None
        try:
            # One token a second per answer, 900 tokens: the answers outlast the phase, and the
            # readers are mostly waiting, as people reading are.
            engine = self.start(procs.start_engine("realistic", 900, "--decode-step-time", "1.0"))
            daphne = self.start(procs.start_daphne(self.product_env(engine.url), "readers"))
            result["engine"] = "--speed realistic --decode-step-time 1.0 (one token a second), 900-token answers"
            result |= asyncio.run(self.reader_ramp(daphne, steps))
        except Exception as exc:
            result["error"] = failure(exc)
        finally:
            self.stop(daphne)
            self.stop(engine)
        self.results["phases"]["readers"] = result
        log(report.readers_text(result))

    async def reader_ramp(self, daphne, steps: list[int]) -> dict:
        owners = self.accounts["readers"]
        pid = daphne.proc.pid
        out: dict = {"steps": []}
        async with load.http_client(self.timeout) as client:
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
                    if not self.budget.allows(45):
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
                    log(report.reader_step_line(step))
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

    # -- 7. routing across nodes ----------------------------------------------------------------------

    def routing_seconds(self) -> int:
        """What the routing phase takes (seven rows of the workload, and the engines' start-up)."""
        return 150 if self.args.quick else 420

    def routing(self) -> None:
        """bench/routing.py in its own process: it configures its own Django (no Redis, a throwaway
        database) and starts its own workers; its table prints as it goes, its figures come back in
        bench/results/routing.json."""
        out = RESULTS / "routing.json"
        out.unlink(missing_ok=True)  # never read an earlier run's figures as this one's
        argv = [sys.executable, str(ROOT / "bench" / "routing.py"), "--no-doc"]
        argv += ["--quick"] if self.args.quick else []
        argv += ["--no-smg"] if self.args.no_peers else []
        log()
        done = subprocess.run(argv, cwd=ROOT, check=False, timeout=self.routing_seconds() * 3)
        if not out.exists():
            raise RuntimeError(f"bench/routing.py exited with {done.returncode} without writing its figures")
        self.results["phases"]["routing"] = json.loads(out.read_text())

    # -- the whole run --------------------------------------------------------------------------------

    def run(self) -> int:
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / "errors.log").unlink(missing_ok=True)
        log(
            f"make bench{' --quick' if self.args.quick else ''}: results in {RESULTS.relative_to(ROOT)}/, "
            f"doc in docs/PERFORMANCE.md; time budget {self.args.budget_minutes:.0f} min"
        )
        try:
            self.setup()
        except Exception as exc:
            log(f"Set-up failed, nothing measured: {failure(exc)} (see {LOGS.relative_to(ROOT)}/errors.log)")
            self.cleanup()
            return 1
        phases = [
            ("matrix", self.matrix, 0),
            ("profile", self.profile, 30),
            ("history", self.history, 40),
            ("overload", self.overload, 100),
            ("abuse", self.abuse, 45 if self.args.quick else 75),
            ("readers", self.readers, 60),
            ("routing", self.routing, self.routing_seconds()),
        ]
        for name, phase, needed in phases:
            if name not in self.args.phases:
                continue
            if not self.budget.allows(needed):
                self.results["phases"][name] = {"skipped": f"time budget ({self.budget.left():.0f} s left)"}
                log(f"\n{name}: skipped, time budget")
                continue
            if name in ("overload", "abuse", "readers", "routing") and self.daphne is not None:
                self.stop(self.daphne)  # one Daphne at a time
                self.daphne = None
            began = time.monotonic()
            try:
                phase()
            except Exception as exc:
                self.results["phases"].setdefault(name, {})["error"] = failure(exc)
                log(f"{name}: failed: {self.results['phases'][name]['error']}")
            self.results["phase_seconds"][name] = round(time.monotonic() - began)
        self.results["elapsed_s"] = round(self.budget.elapsed(), 0)
        self.results["machine"]["loadavg_at_end"] = [round(x, 2) for x in __import__("os").getloadavg()]
        self.cleanup()
        if self.args.sections_only:
            run = [name for name in self.args.phases if name in self.results["phases"]]
            paths = report.update_sections(self.results, run, RESULTS, ROOT / "docs" / "PERFORMANCE.md", PATHS)
            log(f"\nWrote {', '.join(str(p.relative_to(ROOT)) for p in paths)} (the sections of {', '.join(run)})")
            return 0
        self.results["targets"] = report.targets(self.results)
        paths = report.write_all(self.results, RESULTS, ROOT / "docs" / "PERFORMANCE.md", PATHS)
        log(report.targets_text(self.results["targets"]))
        log(
            f"\nWrote {', '.join(str(p.relative_to(ROOT)) for p in paths)} in {self.results['elapsed_s']:.0f} s "
            f"(seconds per phase: {self.results['phase_seconds']})"
        )
        return 0

    def cleanup(self) -> None:
        if self.sampler:
            self.sampler.stop()
        for process in list(self.processes):
            self.stop(process)


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
    parser.add_argument("--budget-minutes", type=float, default=22.0, help="skip later phases past this")
    parser.add_argument(
        "--capacity",
        type=float,
        default=20.0,
        help="answers/s taken as capacity for the overload phase when web@50 was not measured",
    )
    parser.add_argument(
        "--overload-rate",
        type=float,
        default=None,
        help="sends/s offered in the overload phase (default: 3 x the web path's answers/s at 50)",
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

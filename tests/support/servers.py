"""A real Daphne server for integration and browser tests.

It runs the product in its own process, against the pytest test database (tests using it need
`transactional_db`, so what they create is committed and visible to the server) and the same Redis,
with SGLANG_URL pointing at a simulated SGLang worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from django.conf import settings

from harness.engines import free_port
from harness.temp_files import new_log_file

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The URL of the database pytest-django created for this run (test_<name>)."""
    db = settings.DATABASES["default"]
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@dataclass
class LiveServer:
    base_url: str
    process: subprocess.Popen
    log_path: Path
    env: dict = field(default_factory=dict)

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """Kill the server process outright, as a crash would (no cleanup runs)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def start_daphne(
    *,
    engine_url: str,
    extra_env: dict | None = None,
    timeout: float = 60,
    database: str | None = None,
    require_database: bool = True,
    args: Sequence[str] = (),
    log_dir: Path | None = None,
) -> LiveServer:
    """Daphne on a free port, ready when /healthz answers 200 (the process answers) and, with
    `require_database`, /readyz finds the database (whatever it says of Redis and the engines).

    `database` is a database URL other than the test database (the default). `args` are more of
    Daphne's own options (`--proxy-headers` behind nginx); `log_dir` keeps its log there rather than in
    the session's log directory (pytest's, see harness/temp_files.py).
    """
    port = free_port()
    log_path = new_log_file("daphne", log_dir)
    log_file = log_path.open("ab")
    env = {
        **os.environ,
        "DJANGO_PROFILE": "test",
        "DATABASE_URL": database or database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "SGLANG_URL": engine_url,
        "PYTHONUNBUFFERED": "1",
        # The test machine's CPU is shared with the browser, PostgreSQL and the tests themselves: a refusal
        # because the server's loop ran late would be their noise, not the test's subject. The tests that
        # are about overload set it (tests/chat/test_load.py, tests/test_overload.py).
        "WEB_MAX_LOOP_LAG_MS": "0",
        **(extra_env or {}),
    }
    # As deployed (deploy/compose.yaml): a listen backlog of 1024, not Twisted's 50. A burst of new
    # connections beyond the backlog is dropped by the kernel, and some of those clients see their
    # connection reset instead of an answer (tests/chat/test_load.py did, 300 at once).
    endpoint = f"tcp:port={port}:interface=127.0.0.1:backlog=1024"
    process = subprocess.Popen(
        [sys.executable, "-m", "config.server", "-e", endpoint, *args, "config.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    log_file.close()  # Daphne holds its own descriptor
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path, env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Daphne exited with {process.returncode}:\n{server.log()}")
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            if httpx.get(f"{server.base_url}/healthz", timeout=5).status_code == 200 and (
                not require_database
                or httpx.get(f"{server.base_url}/readyz", timeout=5).json()["checks"]["database"] == "ok"
            ):
                return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"Daphne did not answer within {timeout}s:\n{server.log()}")

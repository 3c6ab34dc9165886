"""Start simulated SGLang workers and the SGLang Model Gateway (``smg``) on loopback, for the tests and the bench.

Usage::

    from harness.engines import start_gateway, start_simulator

    with start_simulator("--enable-metrics") as worker:      # waits for /health == 200
        ... worker.url ...
    with start_simulator() as a, start_simulator() as b, \\
            start_gateway([a.url, b.url]) as gateway:               # waits for /readiness
        ... gateway.url ...

Each process gets a free port chosen at run time, writes its output to a log file (in pytest's
temporary directory when run by pytest: ``harness/temp_files.py``), and
is stopped deterministically (SIGTERM, then SIGKILL after a grace period). When a test fails, the
logs of every process still running are attached to the report (see ``log_report`` and the hook in
``tests/inference/conftest.py``); a process that died on its own prints its log when stopped.
Nothing here imports Django.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from harness.temp_files import new_log_file

REPO_ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"
#: Every managed process still running, for failure reports.
RUNNING: set[ManagedProcess] = set()


class EngineStartError(RuntimeError):
    """A process did not become ready; the message ends with its log."""


def free_port() -> int:
    """A loopback port nobody listens on right now (the OS picks it; never 8000 or 30000)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((LOOPBACK, 0))
            port = s.getsockname()[1]
        if port not in (8000, 30000):
            return port


def http_get(url: str, *, timeout: float = 5.0, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A plain GET (urllib, so helpers don't depend on the code under test). (status, body); 0 if unreachable."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


class ManagedProcess:
    """A subprocess with a log file, stopped by :meth:`stop` (or on leaving ``with``)."""

    def __init__(self, name: str, argv: list[str], url: str, *, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.url = url
        self.log_path = new_log_file(name)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        RUNNING.add(self)

    def __repr__(self) -> str:
        return f"<{self.name} pid={self.proc.pid} {self.url}>"

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        """The whole log so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def logs(self, tail_lines: int = 200) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-tail_lines:])

    def kill(self) -> None:
        """SIGKILL, as a crash: no cleanup, connections reset. The process is reaped."""
        if self.alive:
            self.proc.kill()
        self.proc.wait(10)
        self.stop()

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL. Idempotent."""
        RUNNING.discard(self)
        died_on_its_own = self.proc.poll() is not None
        if not died_on_its_own:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(grace)
        if not self._log.closed:
            self._log.close()
        if died_on_its_own and self.proc.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL):
            # Shown by pytest only if the test fails: captured output of passing tests is dropped.
            print(f"--- {self.name} exited with {self.proc.returncode}; log {self.log_path}:\n{self.logs()}")

    def wait_until(self, ready: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.05) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if not self.alive:
                raise EngineStartError(f"{self.name} exited with {self.proc.returncode} before {what}:\n{self.logs()}")
            time.sleep(interval)
        self.stop()
        raise EngineStartError(f"{self.name} not {what} after {timeout:.0f}s:\n{self.logs()}")


#: What start_simulator / start_gateway return: ``.url``, ``.stop()``, ``.kill()``, ``.log()``.
Engine = ManagedProcess


def log_report() -> str:
    """The logs of every managed process still running (attached to failing tests' reports)."""
    return "\n\n".join(f"--- {p!r} (log {p.log_path})\n{p.logs(80)}" for p in sorted(RUNNING, key=repr))


# -- simulated workers ----------------------------------------------------------------------------------


def start_simulator(
    *options: str,
    speed: str = "instant",
    api_key: str | None = None,
    env: dict[str, str] | None = None,
    ready_timeout: float = 30.0,
    wait_healthy: bool = True,
    port: int | None = None,
    tool_call_parser: str | None = "qwen",
) -> ManagedProcess:
    """``python -m simulator`` on a free loopback port, ready when /health answers 200.

    ``options`` are the simulator's own flags (``--enable-metrics``, ``--fault-hang``, …). Tool calls
    are parsed as SGLang does with ``--tool-call-parser qwen`` (what the product expects), unless
    ``tool_call_parser=None`` (SGLang's default: tool calls stay raw text).
    With ``wait_healthy=False`` it only waits until the port accepts connections (for workers that
    are meant to fail their health check). ``port`` restarts a worker where one was (a node coming back).
    """
    wanted = port
    for attempt in range(3):
        port = wanted or free_port()
        argv = [sys.executable, "-m", "simulator", "--host", LOOPBACK, "--port", str(port), "--speed", speed, *options]
        if api_key:
            argv += ["--api-key", api_key]
        if tool_call_parser:
            argv += ["--tool-call-parser", tool_call_parser]
        worker = ManagedProcess("simulated-worker", argv, f"http://{LOOPBACK}:{port}", env=env)
        try:
            if wait_healthy:
                worker.wait_until(
                    lambda w=worker: http_get(f"{w.url}/health", timeout=2)[0] == 200,
                    timeout=ready_timeout,
                    what="healthy",
                )
            else:
                worker.wait_until(lambda p=port: accepts(p), timeout=ready_timeout, what="listening")
            return worker
        except EngineStartError:
            in_use = "address already in use" in worker.logs().lower()
            worker.stop()
            if not in_use or attempt == 2:
                raise
    raise AssertionError("unreachable")


def accepts(port: int) -> bool:
    """Whether something listens on this loopback port (a connection is accepted within half a second)."""
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.5):
        return True
    return False


# -- the SGLang Model Gateway -------------------------------------------------------------------------


def smg_binary() -> str:
    """The ``smg`` executable (from the ``router`` extra). Raises rather than skip when it is missing."""
    beside_python = Path(sys.executable).with_name("smg")
    found = str(beside_python) if beside_python.exists() else shutil.which("smg")
    if not found:
        raise FileNotFoundError(
            "`smg` not found: install the router extra (pip install -e '.[router]'), which `make test` does"
        )
    return found


def start_gateway(
    worker_urls: Iterable[str],
    *,
    policy: str = "cache_aware",
    api_key: str | None = None,
    extra_args: Iterable[str] = (),
    ready_timeout: float = 60.0,
) -> ManagedProcess:
    """``smg launch`` in front of ``worker_urls``; ready when /readiness reports every worker healthy."""
    urls = list(worker_urls)
    port, metrics_port = free_port(), free_port()
    argv = [
        smg_binary(),
        "launch",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--worker-urls",
        *urls,
        "--policy",
        policy,
        "--prometheus-host",
        LOOPBACK,
        "--prometheus-port",
        str(metrics_port),
        "--log-level",
        "warn",
        *extra_args,
    ]
    if api_key:
        argv += ["--api-key", api_key]
    gateway = ManagedProcess("smg", argv, f"http://{LOOPBACK}:{port}")

    def all_healthy() -> bool:
        status, body = http_get(f"{gateway.url}/readiness", timeout=2)
        if status != 200:
            return False
        with contextlib.suppress(ValueError):
            return json.loads(body).get("healthy_workers") == len(urls)
        return False

    gateway.wait_until(all_healthy, timeout=ready_timeout, what="ready with all workers healthy", interval=0.1)
    return gateway


def get_load(worker_url: str, *, api_key: str | None = None) -> dict:
    """The worker's legacy /get_load entry (the figures smg polls): num_reqs, num_waiting_reqs, num_tokens."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    status, body = http_get(f"{worker_url}/get_load", headers=headers)
    assert status == 200, f"/get_load answered {status}: {body!r}"
    return json.loads(body)[0]


def wait_for(predicate: Callable[[], bool], *, timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Poll until ``predicate()`` holds; False on timeout (assert on the result for a clear failure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()

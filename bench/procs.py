"""The processes a benchmark run starts and watches: engines, Daphne, the peers (smg, LiteLLM).

Engines and smg come from ``harness.engines`` (free loopback ports, logs, clean stops); this
module adds Daphne with the bench's own environment, LiteLLM's proxy in a separate environment
under ``bench/.peers/`` (installed on first use), and a sampler of CPU time, memory and database
connections. Nothing here imports Django.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness.engines import ManagedProcess, free_port, http_get, smg_binary, start_gateway, start_simulator

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = ROOT / "bench" / ".peers"
# LiteLLM's proxy, pinned: newer releases need packages the registry here does not have yet, and
# two releases of 2026 were compromised and withdrawn, so an exact, known version is installed.
LITELLM_SPEC = "litellm[proxy]==1.100.5"


class PeerUnavailable(RuntimeError):
    """A peer could not be installed or started; the message says why (it goes into its row)."""


# -- engines -----------------------------------------------------------------------------------------


def start_engine(speed: str, answer_tokens: int, *extra: str) -> ManagedProcess:
    """A simulated SGLang worker whose answers are exactly ``answer_tokens`` long."""
    return start_simulator(
        "--min-answer-tokens",
        str(answer_tokens),
        "--max-answer-tokens",
        str(answer_tokens),
        "--log-level",
        "warning",
        *extra,
        speed=speed,
        ready_timeout=60,
    )


def start_smg(engine_url: str) -> ManagedProcess:
    try:
        smg_binary()
    except FileNotFoundError as exc:
        raise PeerUnavailable(str(exc)) from exc
    return start_gateway([engine_url], policy="round_robin", ready_timeout=90)


# -- Daphne ------------------------------------------------------------------------------------------


def start_daphne(env: dict[str, str], name: str, timeout: float = 90) -> ManagedProcess:
    """One Daphne process serving the product with ``env``; ready when /healthz answers 200."""
    port = free_port()
    endpoint = f"tcp:port={port}:interface=127.0.0.1:backlog=1024"  # as deployed (deploy/compose.yaml)
    argv = [sys.executable, "-m", "config.server", "-e", endpoint, "config.asgi:application"]
    server = ManagedProcess(f"daphne-{name}", argv, f"http://127.0.0.1:{port}", env=env)
    server.wait_until(
        lambda: http_get(f"{server.url}/healthz", timeout=2)[0] == 200,
        timeout=timeout,
        what="answering /healthz",
        interval=0.2,
    )
    return server


def keep_log(process: ManagedProcess, log_dir: Path) -> Path | None:
    """Copy a process's log next to the results (its temporary file is not kept)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    target = log_dir / f"{process.name}.log"
    with contextlib.suppress(OSError):
        shutil.copyfile(process.log_path, target)
        return target
    return None


# -- LiteLLM -----------------------------------------------------------------------------------------


def litellm_python() -> Path:
    return PEERS_DIR / "litellm" / "bin" / "python"


def ensure_litellm(log: Path) -> str:
    """Install LiteLLM's proxy into bench/.peers/litellm on first use; returns its version."""
    python = litellm_python()
    marker = PEERS_DIR / "litellm" / ".installed"
    if not (python.exists() and marker.exists() and marker.read_text() == LITELLM_SPEC):
        PEERS_DIR.mkdir(parents=True, exist_ok=True)
        print(f"  installing {LITELLM_SPEC} into {python.parent.parent} (first use; about a minute)", flush=True)
        shutil.rmtree(PEERS_DIR / "litellm", ignore_errors=True)
        venv.create(PEERS_DIR / "litellm", with_pip=True)
        with log.open("ab") as out:
            done = subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", LITELLM_SPEC],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=900,
                check=False,
            )
        if done.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-5:])
            raise PeerUnavailable(f"pip install {LITELLM_SPEC} failed (exit {done.returncode}): {tail}")
        marker.write_text(LITELLM_SPEC)
    found = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise PeerUnavailable(f"LiteLLM is installed but does not import: {found.stderr.strip()[-300:]}")
    return found.stdout.strip()


def start_litellm(engine_url: str, model: str, work_dir: Path) -> ManagedProcess:
    """LiteLLM's proxy (one worker) in front of the engine's OpenAI API, with a clean environment.

    It gets no DATABASE_URL and no keys: without a database it runs stateless, and the local model
    cost map keeps it off the network.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "litellm.yaml"
    config.write_text(
        json.dumps(
            {  # JSON is YAML
                "model_list": [
                    {
                        "model_name": model,
                        "litellm_params": {
                            "model": f"openai/{model}",
                            "api_base": f"{engine_url}/v1",
                            "api_key": "unused",
                        },
                    }
                ],
            }
        )
    )
    port = free_port()
    binary = litellm_python().with_name("litellm")
    # `env -i`: the proxy sees none of our environment (no DATABASE_URL, no keys), only these.
    clean_env = [
        f"PATH={binary.parent}:/usr/bin:/bin",
        f"HOME={work_dir}",
        "LITELLM_LOCAL_MODEL_COST_MAP=True",
        "PYTHONUNBUFFERED=1",
        "LANG=C.UTF-8",
    ]
    argv = [
        "env",
        "-i",
        *clean_env,
        str(binary),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    proxy = ManagedProcess("litellm", argv, f"http://127.0.0.1:{port}")
    proxy.wait_until(
        lambda: http_get(f"{proxy.url}/health/liveliness", timeout=2)[0] == 200,
        timeout=120,
        what="answering /health/liveliness",
        interval=0.5,
    )
    return proxy


# -- watching processes -----------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) and its children, 0 if it is gone."""
    try:
        process = psutil.Process(pid)
        family = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for member in family:
        with contextlib.suppress(psutil.Error):
            times = member.cpu_times()
            total += times.user + times.system
    return total


def store_cpu_seconds() -> dict[str, float]:
    """User + system CPU time of the machine's PostgreSQL server processes (the postmaster and every
    backend alive now) and of its Redis server. A backend that exits between two readings takes its
    time with it; the product keeps its connections pooled, so few do while a level runs."""
    totals = {"postgresql": 0.0, "redis": 0.0}
    for process in psutil.process_iter(["name", "cpu_times"]):
        name, times = process.info["name"] or "", process.info["cpu_times"]
        store = "postgresql" if name.startswith("postgres") else "redis" if name.startswith("redis-server") else ""
        if store and times is not None:
            totals[store] += times.user + times.system
    return totals


def rss_bytes(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


@dataclass
class Sampler:
    """Samples, every ``interval`` seconds, the product's connections to the bench database.

    ``peak()`` returns the most seen since the last ``reset()``: how many connections a level took.
    """

    dsn: str
    database: str
    interval: float = 0.25
    _peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: str = ""

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    # The product logs in as the bench role; this process as the superuser.
                    row = conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND usename = %s",
                        (self.database, self.database),
                    ).fetchone()
                    self._peak = max(self._peak, int(row[0]))
                    self._stop.wait(self.interval)
        except Exception as exc:  # the figure is missing, the run goes on
            self.error = f"{type(exc).__name__}: {exc}"

    def reset(self) -> None:
        self._peak = 0

    def peak(self) -> int | None:
        return None if self.error else self._peak

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)


def machine() -> dict:
    """What the figures were measured on."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": " ".join(os.uname()[i] for i in (0, 2)),
        "python": sys.version.split()[0],
        "loadavg_at_start": [round(x, 2) for x in load],
    }


def wait_http(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if http_get(url, timeout=2)[0] == 200:
            return True
        time.sleep(0.2)
    return False

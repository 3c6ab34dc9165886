"""`make run` (scripts/run-embedded) when a port it needs is taken: one sentence naming the port and
how to choose another, exit status 1, and nothing started (issue 25, item 7)."""

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "run-embedded"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another program listens on (it never answers: a run that polled it would hang, not pass)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run_embedded(**ports: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("SGLANG_URL", "SGLANG_EMBEDDING_URL")}
    env |= {
        "HOST": "127.0.0.1",
        "PORT": str(free_port()),
        "ENGINE_PORT": str(free_port()),
        "EMBEDDING_PORT": str(free_port()),
        **ports,
    }
    # Its own session, so a run that did start servers is stopped whole if it outlives the timeout.
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("scripts/run-embedded did not refuse a taken port within 20 s")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def assert_nothing_started(result: subprocess.CompletedProcess[str]) -> None:
    output = result.stdout + result.stderr
    assert "Open http" not in output
    assert "Simulated SGLang worker on" not in output
    assert "embedding server on" not in output
    # The simulator's own first line ("simulated SGLang worker: http://…"): it was never started.
    assert "simulated SGLang worker: http" not in output
    assert "simulated SGLang worker (--is-embedding): http" not in output


def test_a_taken_web_server_port_is_named_with_how_to_choose_another(taken_port):
    result = run_embedded(PORT=str(taken_port))
    assert result.returncode == 1
    assert f"Port {taken_port} (the web server) is already in use by another program." in result.stderr
    assert "make run PORT=" in result.stderr
    assert_nothing_started(result)


def test_a_taken_engine_port_is_named_with_how_to_choose_another(taken_port):
    result = run_embedded(ENGINE_PORT=str(taken_port))
    assert result.returncode == 1
    assert f"Port {taken_port} (the simulated SGLang worker) is already in use by another program." in result.stderr
    assert "make run ENGINE_PORT=" in result.stderr
    assert_nothing_started(result)


def test_a_taken_embedding_port_is_named_with_how_to_choose_another(taken_port):
    result = run_embedded(EMBEDDING_PORT=str(taken_port))
    assert result.returncode == 1
    assert f"Port {taken_port} (the simulated embedding server) is already in use" in result.stderr
    assert "make run EMBEDDING_PORT=" in result.stderr
    assert_nothing_started(result)


def test_ports_of_servers_it_does_not_start_are_not_checked(taken_port):
    """With SGLANG_URL set no simulated worker starts, so its port may be anyone's; the web server's
    port (taken here too, so the run stops at once) is still named."""
    with socket.socket() as web:
        web.bind(("127.0.0.1", 0))
        web.listen()
        web_port = web.getsockname()[1]
        result = run_embedded(PORT=str(web_port), ENGINE_PORT=str(taken_port), SGLANG_URL="http://127.0.0.1:9")
    assert result.returncode == 1
    assert f"Port {web_port} (the web server) is already in use" in result.stderr
    assert f"Port {taken_port}" not in result.stderr
    assert_nothing_started(result)

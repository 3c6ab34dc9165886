"""`make lint` / `make audit`: scripts/audit-deps never takes a silent vulnerability service for a clean bill.

pip-audit alone answers "No known vulnerabilities found" (exit 0) when its service does not answer, having
audited nothing; that is what happens on this machine. The script first checks that the service reports
the published advisories of a canary pin (Django 3.2.0). These tests point it at a stand-in for an
OSV-compatible service on loopback (AUDIT_OSV_URL), as the billing tests stand in for Stripe's servers:
one that answers, one that answers with a vulnerability in a pinned dependency, and one that is silent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "audit-deps"


def _pin(name: str) -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        pinned, _, version = line.partition("==")
        if pinned.lower().replace("_", "-") == name:
            return version
    raise AssertionError(f"{name} is not pinned")


def _advisory(vuln_id: str, package: str, fixed: str) -> dict:
    return {
        "id": vuln_id,
        "summary": f"a stand-in advisory for {package}",
        "affected": [
            {
                "package": {"name": package, "ecosystem": "PyPI"},
                "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}],
            }
        ],
    }


@pytest.fixture
def osv():
    """An OSV-style /v1/query on loopback that reports what `advisories[(name, version)]` holds."""
    advisories: dict[tuple[str, str], list[dict]] = {}
    asked: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            query = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            key = (query["package"]["name"], query["version"])
            asked.append(key)
            found = advisories.get(key)
            body = json.dumps({"vulns": found} if found else {}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.advisories, server.asked = advisories, asked
    server.url = f"http://127.0.0.1:{server.server_port}/v1/query"
    yield server
    server.shutdown()
    server.server_close()


def audit(osv_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "AUDIT_OSV_URL": osv_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_service_that_knows_the_canarys_advisories_audits_every_pin(osv):
    osv.advisories[("django", "3.2")] = [_advisory("CANARY-1", "django", "3.2.1")]
    run = audit(osv.url, "--require")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "every pin in constraints.txt audited against osv" in run.stdout
    asked = {name for name, _ in osv.asked}
    assert {"django", "celery", "bandit", "pip-audit"} <= asked  # the pins, not only the canary


def test_a_vulnerable_pin_fails_the_audit_and_is_named(osv):
    osv.advisories[("django", "3.2")] = [_advisory("CANARY-1", "django", "3.2.1")]
    version = _pin("urllib3")
    osv.advisories[("urllib3", version)] = [_advisory("STANDIN-2026-1", "urllib3", "99.0")]
    run = audit(osv.url, "--require")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "urllib3" in run.stdout and "STANDIN-2026-1" in run.stdout


def test_a_silent_service_is_reported_as_not_audited_and_fails_make_audit(osv):
    # Answers every query with "nothing known", as pip-audit's PyPI service does here: not a clean bill.
    lint = audit(osv.url)
    assert lint.returncode == 0
    assert "DEPENDENCIES NOT AUDITED" in lint.stdout and "No known vulnerabilities" not in lint.stdout
    required = audit(osv.url, "--require")
    assert required.returncode == 2
    assert "DEPENDENCIES NOT AUDITED" in required.stdout
    assert {name for name, _ in osv.asked} == {"django"}  # nothing else was asked, so nothing else passed

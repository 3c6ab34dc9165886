"""Tests clean up after themselves: a live run writes nothing to the system temporary directory but
pytest's own directory, where the processes' logs are (harness/temp_files.py).

A check of /tmp before and after the whole suite would fail on any other program's files (this
machine's /tmp is shared, and the suite runs beside other work), so the proof runs a small live run
(tests/support/temp_probe.py: a simulated worker, smg, Daphne, Chromium) in a pytest of its own whose
system temporary directory (TMPDIR) is a fresh, empty directory, and looks at what it left there.
"""

import getpass
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent


def _own_database(url: str, suffix: str) -> str:
    """The same server, another database: the inner pytest must not create or drop this run's."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + suffix))


def test_a_live_run_leaves_nothing_in_the_system_temporary_directory_but_pytests_own(tmp_path_factory):
    # A short path: Chromium puts a Unix socket in the temporary directory, and those paths must stay
    # under 108 bytes (a test's own tmp_path, named after the test, is too long for it).
    system_tmp = tmp_path_factory.mktemp("t")
    env = {
        **os.environ,
        "TMPDIR": str(system_tmp),
        "DATABASE_URL": _own_database(os.environ["DATABASE_URL"], "_tempprobe"),
    }
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/support/temp_probe.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, f"the probe run failed:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"

    left = sorted(entry.name for entry in system_tmp.iterdir())
    assert left == [f"pytest-of-{getpass.getuser()}"], f"left in the system temporary directory: {left}"
    logs = sorted(path.name.split("-")[0] for path in system_tmp.glob("pytest-of-*/pytest-*/logs/*.log"))
    assert {"simulated", "smg", "daphne"} <= set(logs), f"the processes' logs are not in pytest's directory: {logs}"

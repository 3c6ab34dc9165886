"""Where the harness puts the files it writes: pytest's temporary directory, not the system's.

The suite's root conftest (``tests/conftest.py``) calls :func:`use_pytest_temp` once per session with
directories from ``tmp_path_factory``: the logs of every process a test starts (simulated workers, smg,
Daphne) go to ``<basetemp>/logs``, and the system temporary directory of this process and of every
process it starts (``TMPDIR``: Chromium's profiles, Playwright's artifacts, anything a library writes)
becomes ``<basetemp>/tmp``. pytest keeps the last three runs' directories
(``/tmp/pytest-of-<user>/pytest-<n>``) and deletes older ones, so a failure's logs can be read after the
run and nothing piles up.

Outside pytest (the bench) nothing is set, and logs go to the system's temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_log_dir: Path | None = None


def use_pytest_temp(logs: Path, scratch: Path) -> None:
    """Send the helpers' logs to ``logs`` and the system temporary directory to ``scratch``."""
    global _log_dir
    _log_dir = logs
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = str(scratch)  # gettempdir() caches its first answer


def new_log_file(prefix: str, directory: Path | None = None) -> Path:
    """An empty log file named ``<prefix>-<random>.log`` in ``directory`` or the session's log directory."""
    handle, path = tempfile.mkstemp(prefix=f"{prefix}-", suffix=".log", dir=directory or _log_dir)
    os.close(handle)
    return Path(path)

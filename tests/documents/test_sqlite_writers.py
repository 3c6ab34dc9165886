"""On the embedded default's SQLite, an upload made while another file is being read goes through: a
person dropping two files at once in `make run` got "database is locked" (a 500) for the second.
The scenario is tests/support/sqlite_writers.py, run in a process of its own on a SQLite file."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_an_upload_while_another_file_is_being_read_waits_its_turn_instead_of_failing(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DJANGO_PROFILE": "development",
        "REDIS_URL": "",
        "MEDIA_ROOT": str(tmp_path / "media"),
        "EMBEDDED_BEAT": "false",
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.sqlite_writers"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

"""README's "Try the API" section, run as written: the key comes from the management command it names,
and its Python code runs unchanged, with the official `openai` SDK, against a live server."""

import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from accounts.models import User
from billing.models import Plan, UsageRecord
from billing.seed import seed_plans

ROOT = Path(__file__).resolve().parent.parent
SECTION = "### Try the API"


def readme_section() -> str:
    readme = (ROOT / "README.md").read_text()
    assert SECTION in readme, f"README.md has no {SECTION!r} section"
    section = readme.split(SECTION, 1)[1]
    return re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.M)[0]


def fenced(section: str, language: str) -> str:
    blocks = re.findall(rf"^```{language}\n(.*?)^```", section, flags=re.M | re.S)
    assert len(blocks) == 1, f"expected one ```{language} block in README's {SECTION!r}, found {len(blocks)}"
    return blocks[0]


def shell_line(script: str, needle: str) -> str:
    lines = [line for line in script.splitlines() if needle in line]
    assert len(lines) == 1, f"expected one line with {needle!r} in README's shell block"
    return lines[0]


@pytest.fixture
def seeded(transactional_db):
    seed_plans(Plan)  # the data migration's plans (a transactional test's flush empties the table)
    call_command("seed_demo_users", stdout=io.StringIO())  # what `make run` does first


def test_the_readme_api_example_works_as_written_against_a_live_server(embed_server, seeded):
    server = embed_server  # README's example embeds too, as `make run` offers
    section = readme_section()
    script = fenced(section, "sh")
    code = fenced(section, "python")

    # The key, from the command line README gives: `... manage.py create_api_key <email>`.
    command = shlex.split(shell_line(script, "manage.py create_api_key").split("$(", 1)[1].rstrip(")"))
    args = command[command.index("manage.py") + 1 :]
    out = io.StringIO()
    call_command(*args, stdout=out)
    key = out.getvalue().strip()
    assert key.startswith("sk-sgl-")

    # The address README exports, moved to the test server's port; nothing else of the user's environment.
    base_url = shell_line(script, "OPENAI_BASE_URL=").split("=", 1)[1].strip()
    assert base_url == "http://127.0.0.1:8000/v1"  # where `make run` serves
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env |= {"OPENAI_BASE_URL": server.base_url + "/v1", "OPENAI_API_KEY": key}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip()
    demo = User.objects.get(email=args[1])
    assert UsageRecord.objects.filter(user=demo, api_key_id__isnull=False).count() >= 1

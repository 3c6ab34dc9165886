"""The direction of every import between the product's packages is checked (docs/ARCHITECTURE.md,
"Layering"): the import contracts in pyproject.toml ([tool.importlinter]) hold, `make test` fails as
`make lint` does on an import that runs back up, and the rules the contracts cannot see are checked here."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]


def lint_imports(where: Path) -> subprocess.CompletedProcess:
    # --no-cache: nothing written beside the code.
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(where / "pyproject.toml")],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_that_runs_back_up_breaks_them(tmp_path):
    """The same contracts over a copy of the code in which billing imports chat (above it)."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    selectors = tmp_path / "billing" / "selectors.py"
    selectors.write_text(selectors.read_text() + "\nfrom chat.models import Conversation  # noqa: E402,F401\n")

    result = lint_imports(tmp_path)

    assert result.returncode != 0
    assert "BROKEN" in result.stdout and "billing.selectors -> chat.models" in result.stdout


def _constructions(name: str) -> list[str]:
    """Where the product's code calls `name(...)` (by that name, or as an attribute of a module)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call):
                    called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    if called == name:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_engine_client_is_made_by_inference_connect():
    """Whoever asks an engine for something, the address is spoken to the same way (key, protocol,
    gateway, time-outs): inference.connect.engine_client is the one place an SGLangClient is made."""
    made = _constructions("SGLangClient")
    assert [where.split(":")[0] for where in made] == ["inference/connect.py"], made

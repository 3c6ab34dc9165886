"""The wheel this project builds is the product: installed into an environment of its own, away from
the checkout, Django starts with every installed app imported from the wheel, and finds the site's
templates and static files there.

Offline and quick: the wheel is built by the pip and setuptools of the running environment (no build
isolation, no index), and installed without its dependencies into a new virtual environment with no
pip of its own; the dependencies, already installed here, are added behind it by a .pth file. So the
new environment's own site-packages (the wheel) comes first, and this checkout is never on its path.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The checkout's own apps: each must come from the wheel, not from this tree.
OWN_APPS = {"accounts", "api", "billing", "chat", "console", "inference", "moderation"}
#: What is not the product's source, or what running it writes: never copied to build the wheel from.
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv*",
    "node_modules",
    "var",
    "staticfiles",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "test-results",
    "results",
    ".peers",
)
#: Run inside the installed environment: what Django imported, and where it finds each template and
#: static file of the checkout (their relative paths come on stdin).
PROBE = """
import json, sys
import django
from django.apps import apps
from django.conf import settings
from django.contrib.staticfiles import finders
from django.template.loader import get_template

django.setup()
wanted = json.load(sys.stdin)
print(json.dumps({
    "sys_path": sys.path,
    "installed_apps": list(settings.INSTALLED_APPS),
    "app_modules": {c.name: c.module.__file__ for c in apps.get_app_configs()},
    "settings_module": sys.modules[settings.SETTINGS_MODULE].__file__,
    "templates": {name: get_template(name).origin.name for name in wanted["templates"]},
    "static": {name: finders.find(name) for name in wanted["static"]},
}))
"""


def _run(argv, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=240, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def _files(top: Path) -> list[str]:
    return sorted(p.relative_to(top).as_posix() for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the new environment's python, its site-packages, the environment for running Django in it)."""
    work = tmp_path_factory.mktemp("packaging")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)  # setuptools writes build/ beside what it builds
    dist = work / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist, source])
    [wheel] = dist.glob("sglchat-*.whl")

    target = work / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", target])
    python = target / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel])
    site_packages = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    # The dependencies, from this environment, behind the wheel's own packages. Paths in a .pth file
    # are added as they are (their own .pth files, such as this checkout's editable install, are not read).
    dependencies = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site_packages / "sglchat_test_dependencies.pth").write_text("\n".join(sorted(dependencies)) + "\n")

    run_dir = work / "elsewhere"
    run_dir.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(run_dir),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_PROFILE": "test",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:9/never_connected",  # check reads no database
    }
    return python, site_packages, {"cwd": run_dir, "env": env}


def test_django_check_passes_with_the_installed_wheel_outside_the_checkout(installed):
    python, _, where = installed
    done = _run([python, "-m", "django", "check", "--fail-level", "WARNING"], **where)
    assert "System check identified no issues" in done.stdout


def test_every_installed_app_and_the_sites_files_come_from_the_installed_wheel(installed):
    python, site_packages, where = installed
    wanted = {"templates": _files(ROOT / "templates"), "static": _files(ROOT / "static")}
    assert wanted["templates"] and wanted["static"]
    probe = json.loads(_run([python, "-c", PROBE], input=json.dumps(wanted), **where).stdout)

    assert str(ROOT) not in probe["sys_path"] and str(where["cwd"]) in probe["sys_path"]
    # Every INSTALLED_APPS entry was imported (django.setup() did), the checkout's own from the wheel.
    assert len(probe["app_modules"]) == len(probe["installed_apps"])
    own = {name: path for name, path in probe["app_modules"].items() if name in OWN_APPS}
    assert set(own) == OWN_APPS
    for path in [*own.values(), probe["settings_module"]]:
        assert Path(path).is_relative_to(site_packages), path
    # Each template compiles and each static file is found, none of them in this checkout.
    for kind in ("templates", "static"):
        for name, path in probe[kind].items():
            assert path and not Path(path).is_relative_to(ROOT), (kind, name, path)

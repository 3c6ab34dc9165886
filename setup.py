"""Only what pyproject.toml cannot say: the site's templates and static files, each file in its folder,
as data files of the wheel (installed under share/sglchat/ in the environment, where config/settings.py
finds them when there is no checkout). Everything else about the package is in pyproject.toml."""

from pathlib import Path

from setuptools import setup


def tree(top: str) -> list[tuple[str, list[str]]]:
    files = sorted(p for p in Path(top).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    folders = sorted({p.parent for p in files})
    return [
        (f"share/sglchat/{folder.as_posix()}", [p.as_posix() for p in files if p.parent == folder])
        for folder in folders
    ]


setup(data_files=tree("templates") + tree("static"))

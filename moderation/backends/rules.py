"""The `rules` backend: the categories staff edit in the admin, as precompiled regular expressions.

Each enabled category becomes one compiled expression (its words as whole-word alternatives, and
its patterns), per stage. They are compiled once and kept in this process; editing a category
bumps a version number in the shared cache, and each process recompiles when it sees a new version.
The version is read by `prepare`, once per message or streaming answer (one cache read), so
screening a streaming answer's windows costs regular expressions only: no database, no cache
round trip.
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass

from django.core.cache import cache

from moderation.backends import INPUT, OUTPUT, Hit

VERSION_KEY = "moderation:rules-version"


@dataclass(frozen=True)
class CompiledCategory:
    name: str
    block: bool
    regex: re.Pattern


def compile_category(name: str, words: list[str], patterns: list[str], *, block: bool) -> CompiledCategory | None:
    parts = [r"(?<!\w)" + r"\s+".join(re.escape(w) for w in word.split()) + r"(?!\w)" for word in words]
    parts += [f"(?:{p})" for p in patterns]
    if not parts:
        return None
    return CompiledCategory(name=name, block=block, regex=re.compile("|".join(parts), re.IGNORECASE))


def bump_version() -> None:
    """Tell every process its compiled rules are out of date (on every save or delete of a category)."""
    cache.set(VERSION_KEY, uuid.uuid4().hex, None)


class _Compiled:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version: object = None
        self.by_stage: dict[str, list[CompiledCategory]] = {INPUT: [], OUTPUT: []}


_compiled = _Compiled()


def _load() -> dict[str, list[CompiledCategory]]:
    from moderation.models import Category

    by_stage: dict[str, list[CompiledCategory]] = {INPUT: [], OUTPUT: []}
    for category in Category.objects.filter(enabled=True).order_by("action", "name"):  # "block" before "flag"
        try:
            compiled = compile_category(
                category.name,
                category.word_list(),
                category.pattern_list(),
                block=category.action == Category.Action.BLOCK,
            )
        except re.error:
            continue  # the admin refuses an invalid pattern; one saved some other way is skipped
        if compiled is None:
            continue
        for stage in (INPUT, OUTPUT):
            if category.applies_to in (Category.AppliesTo.BOTH, stage):
                by_stage[stage].append(compiled)
    return by_stage


def refresh() -> None:
    """Recompile the categories if staff changed them since this process last compiled (one cache read)."""
    version = cache.get(VERSION_KEY)
    if version is None:  # a cache that lost it: start a new version, so every process reloads
        version = uuid.uuid4().hex
        cache.add(VERSION_KEY, version, None)
        version = cache.get(VERSION_KEY, version)
    if version == _compiled.version:
        return
    with _compiled.lock:
        if version != _compiled.version:
            _compiled.by_stage = _load()
            _compiled.version = version


def categories(stage: str) -> list[CompiledCategory]:
    """The compiled categories for `stage`, as of the last `refresh` (no I/O)."""
    return _compiled.by_stage[stage]


def match(compiled: list[CompiledCategory], text: str) -> list[Hit]:
    hits = [Hit(category=c.name, block=c.block, score=1.0, backend="rules") for c in compiled if c.regex.search(text)]
    return sorted(hits, key=lambda h: not h.block)


class RulesBackend:
    name = "rules"
    blocking = False  # a few precompiled regular expressions over a short text

    def prepare(self, stage: str) -> None:
        refresh()

    def screen(self, text: str, stage: str) -> list[Hit]:
        return match(categories(stage), text)


def backend() -> RulesBackend:
    return RulesBackend()

"""Moderation backends: each judges a text and says which categories it hits.

Every backend has the same small interface (a `name`, and `screen(text, stage)` returning the hits
it found, strongest first); `moderation.services` runs the ones named in MODERATION_BACKENDS, in
order, and decides. A backend raises `BackendError` (or any exception, or times out) when it cannot
judge; the services apply MODERATION_FAIL_MODE to that, never the backend itself.

    rules.py       categories of words and patterns staff edit in the admin (in-process, precompiled)
    openai.py      any OpenAI-compatible /v1/moderations endpoint
    classifier.py  alt-profanity-check, an offensive-language classifier on the CPU (optional extra)
    llm.py         a guard model (Llama Guard 3) served by SGLang, through the inference client
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import Protocol

INPUT, OUTPUT = "input", "output"


@dataclass(frozen=True)
class Hit:
    """One category a text falls in: whether it blocks or only flags, and how sure the backend is."""

    category: str
    block: bool
    score: float = 1.0
    backend: str = ""


class BackendError(Exception):
    """The backend could not judge the text (unreachable, timed out, a bad answer)."""


class Backend(Protocol):
    name: str
    #: True when `screen` may wait on I/O or heavy CPU work: the services run it off the event loop.
    blocking: bool

    def prepare(self, stage: str) -> None:
        """Get ready to screen at `stage` (INPUT or OUTPUT): may read the database (called from a
        thread, once per message or streaming answer, never per window)."""
        ...

    def screen(self, text: str, stage: str) -> list[Hit]:
        """The categories `text` hits at `stage`, blocking ones first; [] when clean. Raises when it
        cannot judge."""
        ...


KNOWN = {
    "rules": "moderation.backends.rules",
    "openai": "moderation.backends.openai",
    "classifier": "moderation.backends.classifier",
    "llm": "moderation.backends.llm",
}


@cache
def load(name: str) -> Backend:
    """The backend called `name` (one instance per process)."""
    try:
        module = KNOWN[name]
    except KeyError:
        raise ValueError(f"Unknown moderation backend {name!r}; known: {', '.join(KNOWN)}.") from None
    return importlib.import_module(module).backend()

"""The moderation hook every message passes through.

The policy here lets everything through; the moderation issue replaces `screen_input` and
`screen_output` with real classifiers and a review queue. Callers already act on the verdict, so
that change needs no edits outside this app.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""


ALLOW = Verdict(allowed=True)


def screen_input(user, text: str) -> Verdict:
    """Judge what a user asks before it reaches a model."""
    return ALLOW


def screen_output(user, text: str) -> Verdict:
    """Judge a model's finished answer before it is kept as final."""
    return ALLOW

"""People chatting over HTTP while a test watches the fleet: new questions, one answer at a time."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from chat.models import Message
from tests.chat.live import ChatClient

#: Seconds people keep asking before the test gives up waiting for what it needs. (A node that failed a
#: request is passed over by its server for a few seconds: inference.routing.)
ASKING_SECONDS = 120


def ask_until(people: ChatClient, enough: Callable[[], bool]) -> list[dict]:
    """New questions, one answer at a time, until `enough()`; returns the answers (the `done` messages)."""
    answers, deadline = [], time.monotonic() + ASKING_SECONDS
    while time.monotonic() < deadline:
        turn = people.send_ok(f"Question {len(answers)}: when does the harbour open, and who keeps the lighthouse?")
        answers.append(people.answer(turn["assistant_message"]["id"])[1])
        if enough():
            return answers
    served = Counter(Message.objects.filter(role="assistant").values_list("node", flat=True))
    raise AssertionError(f"{len(answers)} questions in {ASKING_SECONDS} s and still not enough: {dict(served)}")


def answers_by(node: str, since) -> int:
    """People's answers `node` wrote since `since`."""
    return Message.objects.filter(role="assistant", node=node, created__gte=since).count()

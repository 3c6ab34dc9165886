"""The promise every fault test ends on, checked one way for all of them.

Whatever failed, once the system has come to rest:

1. every user message the product accepted (answered 201) is stored, with exactly what was typed;
2. every answer is in a final state (none left `pending` or `streaming`);
3. every answer that generated anything has exactly one ledger row, with its counts; one that
   generated nothing has none (nothing is billed); no ledger row belongs to no answer;
4. each user's quota counter equals the ledger (or is missing, to be rebuilt from it, when Redis
   itself lost its data), and no reservation is still held.

`Accepted` collects the turns a test got a 201 for (the send, regenerate and edit responses), so
the checker knows which user messages must exist and which answers must have ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from billing.models import UsageRecord
from billing.quota_store import get_store
from billing.selectors import current_period, ledger_total
from chat.models import Message
from tests.support.waiting import wait_until


@dataclass
class Accepted:
    """The turns the product accepted during a test: (user message id, what was typed, answer id)."""

    turns: list[tuple[int, str, int]] = field(default_factory=list)

    def add(self, response: dict, typed: str | None = None) -> dict:
        """Record a 201 response of send/regenerate/edit; returns it. `typed` is what the user sent
        (None for a regeneration, which adds no user message)."""
        user_message = response["user_message"]
        self.turns.append((user_message["id"], typed, response["assistant_message"]["id"]))
        return response

    @property
    def answer_ids(self) -> list[int]:
        return [answer for _, _, answer in self.turns]


def answers_of(users) -> list[Message]:
    return list(Message.objects.filter(conversation__owner__in=users, role=Message.Role.ASSISTANT).order_by("id"))


def assert_invariants(
    users, accepted: Accepted, *, counters_may_be_lost: bool = False, settle_timeout: float = 60
) -> None:
    """Assert the four promises for `users` (a list) after a fault. Waits up to `settle_timeout`
    seconds for answers still being written to end (a runner finishing, retrying its final write);
    it never ends them itself: a test whose fault leaves an answer for the reaper runs the reaper."""
    users = list(users)
    wait_until(
        lambda: not Message.objects.filter(conversation__owner__in=users, status__in=Message.ACTIVE_STATUSES).exists(),
        timeout=settle_timeout,
        what="every answer to reach a final state",
    )

    # 1. Every accepted user message is stored as typed.
    for user_message_id, typed, answer_id in accepted.turns:
        stored = Message.objects.filter(pk=user_message_id, role=Message.Role.USER).first()
        assert stored is not None, f"accepted user message {user_message_id} is gone"
        if typed is not None:
            assert stored.content == typed, f"user message {user_message_id} was changed: {stored.content!r}"
        answer = Message.objects.filter(pk=answer_id).first()
        assert answer is not None, f"the answer {answer_id} to an accepted message is gone"
        assert answer.parent_id == user_message_id

    # 2. Every answer is in a final state.
    answers = answers_of(users)
    assert set(accepted.answer_ids) <= {a.pk for a in answers}
    active = [(a.pk, a.status) for a in answers if a.status in Message.ACTIVE_STATUSES]
    assert not active, f"answers not in a final state: {active}"

    # 3. One ledger row per answer that generated anything, with the answer's own counts; none for one
    #    that generated nothing (nothing is billed); none without an answer.
    rows = UsageRecord.objects.filter(user__in=users, api_key_id__isnull=True)
    per_answer: dict[str, list[UsageRecord]] = {}
    for row in rows:
        per_answer.setdefault(row.generation_id, []).append(row)
    for answer in answers:
        found = per_answer.pop(str(answer.pk), [])
        expected = 1 if answer.completion_tokens else 0
        assert len(found) == expected, (
            f"answer {answer.pk} ({answer.status}, {answer.completion_tokens} tokens generated) "
            f"has {len(found)} ledger rows, not {expected}"
        )
        for row in found:
            assert (row.prompt_tokens, row.cached_tokens, row.completion_tokens) == (
                answer.prompt_tokens,
                answer.cached_tokens,
                answer.completion_tokens,
            ), f"answer {answer.pk}'s ledger row does not match its counts"
    assert not per_answer, f"ledger rows without an answer: {sorted(per_answer)}"

    # 4. Quota counters equal the ledger; nothing still held.
    store = get_store()
    for user in users:
        period = current_period(user).period
        used, held = store.snapshot(user.pk, period.key)
        truth = ledger_total(user.pk, period)
        if used is None:  # never counted (no usage yet), or lost with Redis's data
            assert counters_may_be_lost or truth == 0, (
                f"user {user.pk} has no quota counter, but the ledger has {truth} tokens"
            )
        else:
            assert used == truth, f"user {user.pk}: counter says {used} tokens, the ledger {truth}"
        assert held == 0, f"user {user.pk}: {held} tokens still held by reservations"

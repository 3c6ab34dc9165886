"""Reading evaluations: two runs of one set compared item by item, and what one version of a model
served (a rollout's gates)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from chat.models import AnswerFeedback, Message
from evals.models import EvalItem, EvalResult, EvalRun
from inference import version_stats
from inference.models import InferenceNode


@dataclass(frozen=True)
class ItemComparison:
    item: EvalItem
    before: EvalResult | None
    after: EvalResult | None

    @property
    def change(self) -> str:
        """ "better", "worse" or "same" from the first run to the second (by pass, then by score); "" when
        either run has no result for the item."""
        if self.before is None or self.after is None:
            return ""
        before, after = (self.before.passed, self.before.score), (self.after.passed, self.after.score)
        if after > before:
            return "better"
        if after < before:
            return "worse"
        return "same"


@dataclass(frozen=True)
class Comparison:
    before: EvalRun
    after: EvalRun
    items: list[ItemComparison]

    def count(self, change: str) -> int:
        return sum(1 for entry in self.items if entry.change == change)

    @property
    def changed(self) -> list[ItemComparison]:
        return [entry for entry in self.items if entry.change in ("better", "worse")]


def compare(before: EvalRun, after: EvalRun) -> Comparison:
    """Two runs of the same set, item by item (the set's order), in three queries. Raises ValueError for
    runs of different sets."""
    if before.eval_set_id != after.eval_set_id:
        raise ValueError("only two runs of the same eval set can be compared")
    results = {(r.run_id, r.item_id): r for r in EvalResult.objects.filter(run__in=[before.pk, after.pk])}
    items = EvalItem.objects.filter(eval_set_id=before.eval_set_id)
    return Comparison(
        before=before,
        after=after,
        items=[
            ItemComparison(item, results.get((before.pk, item.pk)), results.get((after.pk, item.pk))) for item in items
        ],
    )


@dataclass(frozen=True)
class VersionFigures:
    """What one version of a model (a node group) served since a moment: what a rollout's gates read."""

    #: People's answers it wrote (web chat), ended; of them, blocked by moderation.
    answers: int = 0
    blocked: int = 0
    #: Generation requests sent to it (every transport), and how many it failed (inference.version_stats).
    sent: int = 0
    failed: int = 0
    ttft_p95_ms: int | None = None
    tokens_per_second: float | None = None
    rated: int = 0
    thumbs_down: int = 0

    @property
    def error_rate(self) -> float | None:
        return self.failed / self.sent if self.sent else None

    @property
    def block_rate(self) -> float | None:
        return self.blocked / self.answers if self.answers else None

    @property
    def thumbs_down_rate(self) -> float | None:
        return self.thumbs_down / self.rated if self.rated else None

    def as_dict(self) -> dict:
        return {
            "answers": self.answers,
            "sent": self.sent,
            "failed": self.failed,
            "blocked": self.blocked,
            "ttft_p95_ms": self.ttft_p95_ms,
            "tokens_per_second": round(self.tokens_per_second, 1) if self.tokens_per_second is not None else None,
            "rated": self.rated,
            "thumbs_down": self.thumbs_down,
        }


def _p95(values: list[int]) -> int | None:
    """The nearest-rank 95th percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(0.95 * len(ordered)) - 1, 0)]


def version_figures(model: str, group: str, since: datetime) -> VersionFigures:
    """What the node group `group` served of `model` since `since`: its answers in the web chat (by the node
    that wrote each), and every request sent to it."""
    nodes = list(InferenceNode.objects.filter(group=group).values_list("name", flat=True))
    if not nodes:
        return VersionFigures()
    answers = Message.objects.filter(
        role=Message.Role.ASSISTANT, model=model, node__in=nodes, created__gte=since
    ).exclude(status__in=Message.ACTIVE_STATUSES)
    rows = list(answers.values_list("status", "ttft_ms", "completion_tokens", "created", "finished"))
    tokens, seconds = 0, 0.0
    for status, ttft_ms, completion, created, finished in rows:
        if status == Message.Status.COMPLETED and ttft_ms is not None and finished is not None and completion > 1:
            decoding = (finished - created).total_seconds() - ttft_ms / 1000
            if decoding > 0:
                tokens, seconds = tokens + completion, seconds + decoding
    ratings = list(AnswerFeedback.objects.filter(message__in=answers).values_list("rating", flat=True))
    sent, failed = version_stats.totals(nodes, since.timestamp())
    return VersionFigures(
        answers=len(rows),
        blocked=sum(1 for row in rows if row[0] == Message.Status.BLOCKED),
        sent=sent,
        failed=failed,
        ttft_p95_ms=_p95([row[1] for row in rows if row[1] is not None]),
        tokens_per_second=tokens / seconds if seconds else None,
        rated=len(ratings),
        thumbs_down=sum(1 for rating in ratings if rating == AnswerFeedback.Rating.DOWN),
    )

"""Reading evaluations: two runs of one set compared item by item."""

from __future__ import annotations

from dataclasses import dataclass

from evals.models import EvalItem, EvalResult, EvalRun


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

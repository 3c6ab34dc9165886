"""What staff do with evaluations: `import_items` adds items to a set from JSON Lines (all or none: a
line that cannot be used refuses the whole file, naming the line); `items_from_feedback` adds the
questions of rated answers (with a recorded reason); `start_run` records a run (in the audit log) and
queues it (the run itself: evals.runner)."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from audit import services as audit
from chat.models import AnswerFeedback
from config.refusals import BadInput
from evals import scoring
from evals.models import EvalItem, EvalRun, EvalSet
from evals.runner import run_evaluation
from inference.models import InferenceNode

FIELDS = {"prompt", "scorer", "reference", "schema", "pattern", "rubric", "system", "threshold"}


def import_items(eval_set: EvalSet, text: str, *, actor=None) -> int:
    """Add the items of a JSON Lines text to `eval_set`; returns how many. One object a line:
    `prompt` (required), `scorer` (exact, contains, similarity, regex, json_schema or judge), then
    `reference` (exact, contains, similarity, with an optional `threshold`), `pattern` (regex), `schema`
    (json_schema) or `rubric` (judge), and optionally `system`.
    Blank lines are skipped. Raises BadInput naming the first line that cannot be used; nothing is added."""
    items = []
    start = eval_set.items.count()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        items.append(_item(eval_set, number, line, position=start + len(items)))
    if not items:
        raise BadInput("The file has no items: write one JSON object a line.")
    with transaction.atomic():
        EvalItem.objects.bulk_create(items)
        audit.record(actor, "evals.import", eval_set, details={"items": len(items)})
    return len(items)


def _item(eval_set: EvalSet, number: int, line: str, *, position: int) -> EvalItem:
    def refused(why: str) -> BadInput:
        return BadInput(f"Line {number}: {why}. Nothing was imported.")

    try:
        data = json.loads(line)
    except ValueError as exc:
        raise refused(f"it is not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise refused("each line is one JSON object")
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise refused(f"unknown field {unknown[0]!r} (the fields are {', '.join(sorted(FIELDS))})")
    prompt, scorer = data.get("prompt"), data.get("scorer")
    if not isinstance(prompt, str) or not prompt.strip():
        raise refused("prompt must be the text to send")
    if scorer not in EvalItem.Scorer.values:
        raise refused(f"scorer must be one of {', '.join(EvalItem.Scorer.values)}")
    needs = {
        "exact": "reference",
        "contains": "reference",
        "similarity": "reference",
        "regex": "pattern",
        "json_schema": "schema",
    }.get(scorer, "rubric")
    given = data.get(needs)
    if needs == "schema":
        why = scoring.check_schema(given)
        if why is not None:
            raise refused(f"schema: {why}")
    elif not isinstance(given, str) or not given.strip():
        raise refused(f"a {scorer} item needs its {needs} as text")
    elif needs == "pattern" and (why := scoring.check_pattern(given)) is not None:
        raise refused(f"pattern: {why}")
    system = data.get("system", "")
    if not isinstance(system, str):
        raise refused("system must be text")
    threshold = data.get("threshold")
    if threshold is not None and (
        scorer != "similarity"
        or isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0 <= threshold <= 1
    ):
        raise refused("threshold is a similarity item's cosine to pass from, between 0 and 1")
    return EvalItem(
        eval_set=eval_set,
        position=position,
        system_prompt=system,
        prompt=prompt,
        scorer=scorer,
        reference="" if needs == "schema" else given,
        schema=given if needs == "schema" else None,
        threshold=threshold,
    )


def check_version(group: str) -> None:
    """A version (node group) can be asked for by name: the product routes (not the Model Gateway), and the
    group has an enabled node. Raises BadInput saying which is not so."""
    if settings.INFERENCE_ROUTING == "gateway":
        raise BadInput(
            "Behind the SGLang Model Gateway the gateway chooses the worker: one version of a model cannot be "
            "asked for by its node group. Leave the version empty, or use the product's own routing."
        )
    if not InferenceNode.objects.filter(group=group, enabled=True).exists():
        raise BadInput(f"No enabled inference node is in the group {group!r}: add one first.")


def start_run(
    eval_set: EvalSet,
    *,
    model: str,
    node_group: str = "",
    judge_model: str = "",
    judge_group: str = "",
    actor=None,
) -> EvalRun:
    """Record a run of `eval_set` on `model` (its version `node_group`, or wherever its traffic goes) and
    queue it. Judge items are graded by `judge_model` (by `model` itself when empty), on its version
    `judge_group` when given. Raises BadInput: a set with no items, a version that cannot be asked for."""
    total = eval_set.items.count()
    if not total:
        raise BadInput("This eval set has no items yet: import some first.")
    for group in sorted({node_group, judge_group} - {""}):
        check_version(group)
    with transaction.atomic():
        evaluation = EvalRun.objects.create(
            eval_set=eval_set,
            model=model,
            node_group=node_group,
            judge_model=judge_model,
            judge_group=judge_group,
            items_total=total,
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
        )
        audit.record(
            actor,
            "evals.run",
            evaluation,
            details={"model": model, "node_group": node_group, "items": total},
        )
        transaction.on_commit(lambda: run_evaluation.delay(evaluation.pk))
    return evaluation


#: What a judge holds a new answer to, for a question whose answer a person rated down with a comment.
FROM_THUMBS_DOWN = (
    "A person rated an earlier answer to this question down, and said: \u201c{comment}\u201d. Pass the answer only "
    "if it does not have that fault (if they gave the right answer, it must agree with it) and answers the "
    "question well."
)


def _telling(rated: AnswerFeedback) -> bool:
    """A rated answer an item can be made of: its question has text, and it is a thumbs up on an answer with
    text or a thumbs down with a comment."""
    question = rated.message.parent
    if question is None or not question.content.strip():
        return False
    if rated.rating == AnswerFeedback.Rating.UP:
        return bool(rated.message.content.strip())
    return bool(rated.comment.strip())


def items_from_feedback(eval_set: EvalSet, ratings: QuerySet[AnswerFeedback], *, reason: object, actor=None) -> int:
    """Add an item for each rated answer in `ratings` to `eval_set`: its question as the prompt; for a thumbs
    down with a comment (the most telling: often the right answer), a judge item whose rubric is that
    comment; for a thumbs up, a similarity item whose reference is the answer the person liked. Thumbs down
    without a comment say too little and are passed over. Copying what people wrote into a set is a reading
    of their conversations: refused without a reason, and recorded with it (and the count) first."""
    chosen = list(ratings.select_related("message__parent").order_by("created", "pk"))
    rows = [f for f in chosen if _telling(f)]
    audit.record_export(
        actor,
        "evals.from_feedback",
        len(rows),
        reason,
        {"eval_set": eval_set.name, "passed_over": len(chosen) - len(rows)},
        target_type=AnswerFeedback._meta.label_lower,
    )
    start = eval_set.items.count()
    items = [
        EvalItem(
            eval_set=eval_set,
            position=start + n,
            prompt=f.message.parent.content,
            **(
                {"scorer": EvalItem.Scorer.SIMILARITY, "reference": f.message.content}
                if f.rating == AnswerFeedback.Rating.UP
                else {"scorer": EvalItem.Scorer.JUDGE, "reference": FROM_THUMBS_DOWN.format(comment=f.comment.strip())}
            ),
        )
        for n, f in enumerate(rows)
    ]
    EvalItem.objects.bulk_create(items)
    return len(items)

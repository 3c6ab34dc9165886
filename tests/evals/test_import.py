"""Importing eval items from JSON Lines: all or none, and a refusal names the line and what is wrong."""

import json

import pytest

from audit.models import AuditEntry
from config.refusals import BadInput
from evals.models import EvalItem, EvalSet
from evals.services import import_items

pytestmark = pytest.mark.django_db

LINES = [
    {"prompt": "What is 2 + 2? Answer with the number only.", "scorer": "exact", "reference": "4"},
    {"prompt": "Name the capital of France.", "scorer": "contains", "reference": "Paris", "system": "Be brief."},
    {"prompt": "Give a year.", "scorer": "regex", "pattern": r"^\d{4}$"},
    {"prompt": "Reply with a JSON object.", "scorer": "json_schema", "schema": {"type": "object"}},
    {"prompt": "Explain tides to a child.", "scorer": "judge", "rubric": "Simple words, and correct."},
    {"prompt": "Describe a lighthouse.", "scorer": "similarity", "reference": "A tower with a lamp.", "threshold": 0.6},
]


def _jsonl(*items) -> str:
    return "\n".join(json.dumps(item) for item in items)


def test_a_file_of_items_is_added_in_order_after_the_sets_own(user):
    eval_set = EvalSet.objects.create(name="Basics")
    assert import_items(eval_set, _jsonl(*LINES[:2]), actor=user) == 2
    assert import_items(eval_set, "\n" + _jsonl(*LINES[2:]) + "\n\n", actor=user) == 4  # blank lines skipped

    items = list(eval_set.items.all())
    assert [i.position for i in items] == [0, 1, 2, 3, 4, 5]
    assert [(i.scorer, i.reference) for i in items] == [
        ("exact", "4"),
        ("contains", "Paris"),
        ("regex", r"^\d{4}$"),
        ("json_schema", ""),
        ("judge", "Simple words, and correct."),
        ("similarity", "A tower with a lamp."),
    ]
    assert items[1].system_prompt == "Be brief." and items[3].schema == {"type": "object"}
    assert items[5].threshold == 0.6 and items[0].threshold is None
    entries = AuditEntry.objects.filter(action="evals.import")
    assert [e.details["items"] for e in entries.order_by("created")] == [2, 4]


@pytest.mark.parametrize(
    "line, says",
    [
        ("not json", "Line 2: it is not JSON"),
        ("[1, 2]", "Line 2: each line is one JSON object"),
        (json.dumps({"prompt": "x", "scorer": "exact", "answer": "4"}), "Line 2: unknown field 'answer'"),
        (json.dumps({"prompt": " ", "scorer": "exact", "reference": "4"}), "Line 2: prompt must be the text to send"),
        (json.dumps({"prompt": "x", "scorer": "bleu", "reference": "4"}), "Line 2: scorer must be one of exact,"),
        (json.dumps({"prompt": "x", "scorer": "contains"}), "Line 2: a contains item needs its reference as text"),
        (json.dumps({"prompt": "x", "scorer": "regex", "pattern": "(unclosed"}), "Line 2: pattern: it is not a"),
        (json.dumps({"prompt": "x", "scorer": "json_schema", "schema": {"type": 7}}), "Line 2: schema: it is not a"),
        (json.dumps({"prompt": "x", "scorer": "judge", "rubric": "ok", "system": 3}), "Line 2: system must be text"),
        (json.dumps({"prompt": "x", "scorer": "similarity", "reference": "y", "threshold": 2}), "Line 2: threshold is"),
        (json.dumps({"prompt": "x", "scorer": "exact", "reference": "y", "threshold": 0.5}), "Line 2: threshold is"),
    ],
)
def test_a_line_that_cannot_be_used_refuses_the_whole_file(line, says):
    eval_set = EvalSet.objects.create(name="Basics")
    with pytest.raises(BadInput) as refused:
        import_items(eval_set, _jsonl(LINES[0]) + "\n" + line)
    assert refused.value.message.startswith(says) and refused.value.message.endswith("Nothing was imported.")
    assert not EvalItem.objects.exists()


def test_an_empty_file_is_refused():
    with pytest.raises(BadInput, match="no items"):
        import_items(EvalSet.objects.create(name="Empty"), "\n  \n")

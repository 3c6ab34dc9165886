"""Evaluations in the staff console: importing items, starting a run on one version, reading its results,
and comparing two runs item by item."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from audit.models import AuditEntry
from evals.admin import EvalItemForm
from evals.models import EvalItem, EvalResult, EvalRun, EvalSet, Rollout
from harness.engines import start_simulator
from inference import fleet
from inference.models import InferenceNode, ModelRoute
from tests.support.accounts import make_staff, signed_in

ITEMS = [
    {"prompt": "Lighthouse keepers trim the wick at dusk.", "scorer": "contains", "reference": "trim the wick"},
    {"prompt": "The harbour opened in 1862.", "scorer": "regex", "pattern": r"\b18\d\d\b"},
]


@pytest.fixture
def console(transactional_db):
    return signed_in(make_staff("evaluator@example.com", is_superuser=True))


def _jsonl(*items) -> bytes:
    return "\n".join(json.dumps(item) for item in items).encode()


def test_staff_import_items_from_a_file_and_a_bad_line_is_named(console):
    eval_set = EvalSet.objects.create(name="Harbour facts")
    url = reverse("admin:evals_evalset_import", args=[eval_set.pk])
    assert console.get(url).status_code == 200

    bad = SimpleUploadedFile("items.jsonl", _jsonl(ITEMS[0], {"prompt": "x", "scorer": "regex", "pattern": "("}))
    refused = console.post(url, {"file": bad})
    assert refused.status_code == 200
    assert "Line 2: pattern: it is not a regular expression" in refused.content.decode()
    assert not EvalItem.objects.exists()

    done = console.post(url, {"file": SimpleUploadedFile("items.jsonl", _jsonl(*ITEMS))}, follow=True)
    assert done.redirect_chain[-1][0] == reverse("admin:evals_evalset_change", args=[eval_set.pk])
    assert "2 items imported into Harbour facts." in done.content.decode()
    assert eval_set.items.count() == 2


def test_staff_start_a_run_and_read_its_results(console, settings):
    with start_simulator("--echo", "--accept-any-model") as echo:
        settings.SGLANG_URL = echo.url
        fleet.invalidate()
        eval_set = EvalSet.objects.create(name="Harbour facts")
        console.post(reverse("admin:evals_evalset_import", args=[eval_set.pk]), {"text": _jsonl(*ITEMS).decode()})
        page = console.get(reverse("admin:evals_evalset_run", args=[eval_set.pk]))
        assert page.status_code == 200 and "sim-small" in page.content.decode()

        started = console.post(
            reverse("admin:evals_evalset_run", args=[eval_set.pk]),
            {"model": "sim-small", "node_group": ""},
            follow=True,
        )

    evaluation = EvalRun.objects.get()
    assert started.redirect_chain[-1][0] == reverse("admin:evals_evalrun_change", args=[evaluation.pk])
    assert evaluation.status == EvalRun.Status.COMPLETED and evaluation.items_passed == 2
    shown = started.content.decode()
    assert "2 / 2" in shown and "100%" in shown and "The answer contains the reference answer." in shown


def test_two_runs_are_compared_item_by_item(console):
    eval_set = EvalSet.objects.create(name="Harbour facts")
    first, second = (
        EvalItem.objects.create(eval_set=eval_set, position=n, prompt=item["prompt"], scorer="exact", reference="x")
        for n, item in enumerate(ITEMS)
    )
    runs = []
    for group, outcomes in (("blue", (True, True)), ("green", (False, True))):
        evaluation = EvalRun.objects.create(
            eval_set=eval_set, model="sim-small", node_group=group, status="completed", items_total=2, items_done=2
        )
        for item, passed in zip((first, second), outcomes, strict=True):
            EvalResult.objects.create(
                run=evaluation, item=item, answer=f"{group} answer", score=float(passed), passed=passed
            )
        runs.append(evaluation)

    page = console.post(
        reverse("admin:evals_evalrun_changelist"),
        {"action": "compare_runs", "_selected_action": [r.pk for r in runs]},
    )

    assert page.status_code == 200
    text = page.content.decode()
    assert "From the first run to the second: 0 better, 1 worse, 1 the same." in text
    assert text.index("blue answer") < text.index("green answer")  # the older run first
    alone = console.post(
        reverse("admin:evals_evalrun_changelist"),
        {"action": "compare_runs", "_selected_action": [runs[0].pk]},
        follow=True,
    )
    assert "Select exactly two runs of the same eval set to compare them." in alone.content.decode()


ROLLOUT = {
    "model": "sim-small",
    "from_group": "blue",
    "to_group": "green",
    "steps": "1, 10, 100",
    "window_seconds": "300",
    "min_answers": "20",
    "max_error_rate": "0.05",
    "max_ttft_p95_ms": "",
    "min_tokens_per_second": "",
    "max_thumbs_down_rate": "",
    "max_block_rate": "",
    "eval_set": "",
    "eval_tolerance": "0",
    "on_failure": "roll_back",
}


def test_staff_start_a_rollout_and_roll_it_back_from_the_console(console):
    InferenceNode.objects.create(name="blue-1", base_url="http://127.0.0.1:9", group="blue")
    InferenceNode.objects.create(name="green-1", base_url="http://127.0.0.1:10", group="green")
    add = reverse("admin:evals_rollout_add")
    assert console.get(add).status_code == 200

    refused = console.post(add, {**ROLLOUT, "to_group": "blue"})
    assert refused.status_code == 200  # the form again, with what was typed and why it cannot start
    assert "The new version must be another node group than the one serving the model now." in refused.content.decode()
    assert not Rollout.objects.exists()

    started = console.post(add, ROLLOUT, follow=True)
    conducted = Rollout.objects.get()
    assert started.status_code == 200 and conducted.steps == [1, 10, 100] and conducted.min_answers == 20
    assert dict(ModelRoute.objects.values_list("group", "weight")) == {"blue": 99, "green": 1}
    page = console.get(reverse("admin:evals_rollout_change", args=[conducted.pk])).content.decode()
    assert "1%" in page and "1 of 3 (1%, 10%, 100%)" in page

    console.post(
        reverse("admin:evals_rollout_changelist"), {"action": "roll_back_selected", "_selected_action": [conducted.pk]}
    )
    conducted.refresh_from_db()
    assert conducted.status == "rolled_back" and conducted.reason == "Rolled back by evaluator@example.com."
    assert dict(ModelRoute.objects.values_list("group", "weight")) == {"blue": 100, "green": 0}
    assert list(AuditEntry.objects.filter(action__startswith="rollouts.").values_list("action", flat=True)) == [
        "rollouts.roll_back",
        "rollouts.start",
    ]


@pytest.mark.parametrize(
    "fields, field, says",
    [
        ({"scorer": "regex", "reference": "(unclosed"}, "reference", "The pattern cannot be used"),
        ({"scorer": "json_schema", "schema": '{"type": 7}'}, "schema", "A JSON schema item needs its schema"),
        ({"scorer": "json_schema"}, "schema", "A JSON schema item needs its schema"),
        ({"scorer": "contains"}, "reference", "This scorer needs its reference"),
        ({"scorer": "exact", "reference": "4", "threshold": "0.5"}, "threshold", "Only a similarity item"),
    ],
)
def test_an_item_typed_on_the_sets_page_is_held_to_what_an_import_is(transactional_db, fields, field, says):
    data = {"position": "0", "prompt": "What is 2 + 2?", "reference": "", "schema": "", "threshold": "", **fields}
    form = EvalItemForm(data=data)
    assert not form.is_valid() and form.errors[field][0].startswith(says)

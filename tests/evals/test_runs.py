"""A run sends each item to the version it names through the product's own path of one answer, scores
it, and keeps it: against real simulated workers (in echo mode each answers with the prompt, so every
scorer's pass and fail is known in advance), with the product's routing, admission and driver."""

from __future__ import annotations

import json
import time

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from audit.models import AuditEntry
from chat.generation import admission
from config.refusals import BadInput
from evals.models import EvalResult, EvalRun, EvalSet
from evals.runner import execute_run
from evals.services import import_items, start_run
from harness.engines import start_simulator
from inference import fleet, rollout, version_stats
from inference.models import InferenceNode, ModelRoute
from tests.support.accounts import make_staff

pytestmark = pytest.mark.django_db(transaction=True)

ITEMS = [
    {
        "prompt": "Lighthouse keepers trim the wick at dusk.",
        "scorer": "exact",
        "reference": "lighthouse keepers trim the wick at dusk.",
    },
    {"prompt": "The tide comes in twice a day.", "scorer": "contains", "reference": "the moon"},
    {"prompt": "The harbour opened in 1862.", "scorer": "regex", "pattern": r"\b1[89]\d\d\b"},
    {
        "prompt": '{"city": "Brest", "population": 139000}',
        "scorer": "json_schema",
        "schema": {"type": "object", "required": ["city", "population"]},
    },
    {
        "prompt": '{"city": "Brest"}',
        "scorer": "json_schema",
        "schema": {"type": "object", "required": ["city", "population"]},
    },
    {"prompt": "Explain the tides to a child.", "scorer": "judge", "rubric": "Simple words, and correct."},
]


@pytest.fixture(scope="module")
def echo():
    with start_simulator("--echo", "--accept-any-model") as worker:
        yield worker


@pytest.fixture(scope="module")
def prose():
    with start_simulator("--accept-any-model") as worker:
        yield worker


@pytest.fixture
def staff(transactional_db):
    return make_staff("evaluator@example.com")


def _set(*items) -> EvalSet:
    eval_set = EvalSet.objects.create(name="Harbour facts")
    import_items(eval_set, "\n".join(json.dumps(item) for item in items))
    return eval_set


def test_a_run_scores_every_item_and_keeps_its_answer_tokens_and_latency(echo, staff, settings):
    settings.SGLANG_URL = echo.url
    fleet.invalidate()

    evaluation = start_run(_set(*ITEMS), model="sim-small", actor=staff)  # Celery runs it eagerly here

    evaluation.refresh_from_db()
    assert evaluation.status == EvalRun.Status.COMPLETED and evaluation.started and evaluation.finished
    assert (evaluation.items_total, evaluation.items_done, evaluation.items_passed) == (6, 6, 3)
    assert evaluation.score == pytest.approx(0.5)
    results = list(EvalResult.objects.filter(run=evaluation).select_related("item"))
    assert [r.passed for r in results] == [True, False, True, True, False, False]
    assert [r.answer for r in results[:5]] == [item["prompt"] for item in ITEMS[:5]]
    assert results[1].detail == "The answer does not contain the reference answer."
    assert "'population' is a required property" in results[4].detail
    # The echo judge repeats its instructions: no verdict, scored 0, and said so.
    assert results[5].detail == "The judge's reply was not in the format it was asked for (no VERDICT line)."
    for result in results:
        assert not result.error and result.completion_tokens > 0 and result.prompt_tokens > 0
        assert result.latency_ms > 0 and result.ttft_ms is not None
    assert evaluation.completion_tokens == sum(r.completion_tokens for r in results)
    assert admission.in_flight() == 0  # every admission place was given back
    entry = AuditEntry.objects.get(action="evals.run")
    assert entry.actor == staff and entry.details == {"model": "sim-small", "node_group": "", "items": 6}


def test_a_run_evaluates_the_version_it_names_even_one_users_do_not_get(echo, prose, staff):
    """Blue (echo) has all the traffic, green (prose) none: a run on green is answered by green alone."""
    InferenceNode.objects.create(name="blue-1", base_url=echo.url, group="blue")
    InferenceNode.objects.create(name="green-1", base_url=prose.url, group="green")
    ModelRoute.objects.create(model="sim-small", group="blue", weight=100)
    ModelRoute.objects.create(model="sim-small", group="green", weight=0)
    fleet.invalidate()
    rollout.invalidate()
    eval_set = _set(ITEMS[0], ITEMS[2])

    counted = "sglchat_node_time_to_first_token_seconds_count"
    before = REGISTRY.get_sample_value(counted, {"node": "green-1"}) or 0.0

    on_green = start_run(eval_set, model="sim-small", node_group="green", actor=staff)
    on_blue = start_run(eval_set, model="sim-small", node_group="blue", actor=staff)

    on_green.refresh_from_db()
    on_blue.refresh_from_db()
    assert on_blue.items_passed == 2  # the echo repeats each prompt
    assert on_green.status == EvalRun.Status.COMPLETED and on_green.items_done == 2
    # The model is under a rollout (it has routes): each version's time to first token is measured.
    assert REGISTRY.get_sample_value(counted, {"node": "green-1"}) == before + 2
    green_answers = list(EvalResult.objects.filter(run=on_green).values_list("answer", flat=True))
    assert all(answer and answer not in (ITEMS[0]["prompt"], ITEMS[2]["prompt"]) for answer in green_answers)


def test_a_set_without_items_cannot_be_run(staff):
    with pytest.raises(BadInput, match="no items yet"):
        start_run(EvalSet.objects.create(name="Empty"), model="sim-small", actor=staff)
    assert not EvalRun.objects.exists()


def test_a_similarity_item_is_scored_by_the_cosine_of_the_embeddings(echo, staff, settings, retrieval):
    """The answer (the echo of the prompt) against its reference, both embedded by the retrieval model."""
    settings.SGLANG_URL = echo.url
    fleet.invalidate()
    prompt = "The keeper trims the wick of the great lamp at dusk."
    items = [
        {"prompt": prompt, "scorer": "similarity", "reference": prompt},
        {"prompt": prompt, "scorer": "similarity", "reference": "Invoices are due within thirty days."},
    ]

    evaluation = start_run(_set(*items), model="sim-small", actor=staff)

    same, unrelated = EvalResult.objects.filter(run=evaluation).order_by("item__position")
    assert same.passed and same.score == pytest.approx(1.0, abs=1e-4)
    assert not unrelated.passed and unrelated.score < 0.8 and unrelated.detail.startswith("Not similar enough")


def test_a_run_whose_worker_died_goes_on_from_the_items_without_a_result(echo, staff, settings):
    """Celery delivers the task again (acks_late) to another worker: the run is not started over."""
    settings.SGLANG_URL = echo.url
    fleet.invalidate()
    eval_set = _set(ITEMS[0], ITEMS[2])
    first = eval_set.items.order_by("position").first()
    evaluation = EvalRun.objects.create(
        eval_set=eval_set, model="sim-small", status="running", items_total=2, created_by=staff
    )
    EvalResult.objects.create(
        run=evaluation, item=first, answer="scored before the worker died", passed=True, score=1.0
    )
    EvalRun.objects.filter(pk=evaluation.pk).update(items_done=1, items_passed=1, score_sum=1.0)

    execute_run(evaluation.pk)

    evaluation.refresh_from_db()
    assert evaluation.status == EvalRun.Status.COMPLETED and (evaluation.items_done, evaluation.items_passed) == (2, 2)
    assert EvalResult.objects.get(run=evaluation, item=first).answer == "scored before the worker died"


def test_the_judge_grades_on_its_own_version_never_the_one_being_evaluated(echo, prose, staff):
    """A rollout's runs are graded by the old version: green's answer is judged by blue (counted there)."""
    InferenceNode.objects.create(name="blue-1", base_url=echo.url, group="blue")
    InferenceNode.objects.create(name="green-1", base_url=prose.url, group="green")
    ModelRoute.objects.create(model="sim-small", group="blue", weight=50)
    ModelRoute.objects.create(model="sim-small", group="green", weight=50)
    fleet.invalidate()
    rollout.invalidate()
    since = time.time()

    start_run(_set(ITEMS[5]), model="sim-small", node_group="green", judge_group="blue", actor=staff)

    assert version_stats.totals(["green-1"], since) == (1, 0)  # the answer
    assert version_stats.totals(["blue-1"], since) == (1, 0)  # its judge


def test_a_version_that_cannot_be_asked_for_is_refused_before_the_run(staff, settings):
    eval_set = _set(ITEMS[0])
    with pytest.raises(BadInput, match="No enabled inference node is in the group 'purple'"):
        start_run(eval_set, model="sim-small", node_group="purple", actor=staff)
    InferenceNode.objects.create(name="blue-1", base_url="http://127.0.0.1:9", group="blue")
    settings.INFERENCE_ROUTING = "gateway"
    with pytest.raises(BadInput, match="Behind the SGLang Model Gateway"):
        start_run(eval_set, model="sim-small", node_group="blue", actor=staff)
    assert not EvalRun.objects.exists()


def test_a_run_another_worker_is_running_is_left_to_it(staff):
    evaluation = EvalRun.objects.create(
        eval_set=_set(ITEMS[0]),
        model="sim-small",
        status="running",
        items_total=1,
        created_by=staff,
        heartbeat=timezone.now(),
    )
    execute_run(evaluation.pk)  # delivered twice: the second delivery sees the first's heartbeat
    evaluation.refresh_from_db()
    assert evaluation.status == "running" and evaluation.items_done == 0 and not evaluation.results.exists()

"""A rollout's rules, in-process: how it starts, what its gates read of the new version, and what it does
when they pass, when one fails (roll back, or hold), and while it waits; every decision in the audit log.
The live rollouts, with real simulated versions and people's answers, are in test_rollouts_live.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone
from prometheus_client import REGISTRY

from audit.models import AuditEntry
from chat.feedback.services import rate_answer
from chat.models import AnswerFeedback, Message
from config.refusals import BadInput
from evals import rollouts
from evals.models import EvalRun, EvalSet, Rollout
from evals.selectors import version_figures
from inference import version_stats
from inference.models import InferenceNode, ModelRoute
from tests.chat.factories import conversation_for, say

pytestmark = pytest.mark.django_db


@pytest.fixture
def groups(db):
    InferenceNode.objects.create(name="blue-1", base_url="http://127.0.0.1:9", group="blue")
    InferenceNode.objects.create(name="green-1", base_url="http://127.0.0.1:10", group="green")


def _weights(model: str = "sim-small") -> dict[str, int]:
    return dict(ModelRoute.objects.filter(model=model).values_list("group", "weight"))


def _answers(user, node: str, count: int, *, status=Message.Status.COMPLETED, ttft_ms=200, ago=timedelta(0)):
    conversation = conversation_for(user)
    made = []
    for n in range(count):
        question = say(conversation, "user", f"Question {n}")
        answer = say(
            conversation,
            "assistant",
            "An answer.",
            parent=question,
            status=status,
            model="sim-small",
            node=node,
            ttft_ms=ttft_ms,
            completion_tokens=50,
        )
        created = timezone.now() - ago - timedelta(seconds=2)
        Message.objects.filter(pk=answer.pk).update(created=created, finished=created + timedelta(seconds=1.2))
        made.append(answer)
    return made


def _started(user, **settings) -> Rollout:
    settings.setdefault("window_seconds", 60)
    settings.setdefault("min_answers", 4)
    conducted = rollouts.start_rollout(model="sim-small", from_group="blue", to_group="green", actor=user, **settings)
    Rollout.objects.filter(pk=conducted.pk).update(step_started=timezone.now() - timedelta(seconds=61))
    conducted.refresh_from_db()
    return conducted


def test_a_rollout_starts_by_giving_the_new_version_its_first_share(groups, staff_user):
    conducted = rollouts.start_rollout(model="sim-small", from_group="blue", to_group="green", actor=staff_user)

    assert conducted.steps == [1, 5, 25, 50, 100] and conducted.share == 1 and conducted.status == "running"
    assert _weights() == {"blue": 99, "green": 1}
    entry = AuditEntry.objects.get(action="rollouts.start")
    assert entry.actor == staff_user and entry.details == {"steps": [1, 5, 25, 50, 100], "share": 1}


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"to_group": "blue"}, "another node group"),
        ({"to_group": "purple"}, "No enabled inference node is in the group 'purple'"),
        ({"steps": [5, 1, 100]}, "must rise from at least 1% and end at 100%"),
        ({"steps": [1, 50]}, "must rise from at least 1% and end at 100%"),
        ({"steps": ["half", 100]}, "whole percentages"),
    ],
)
def test_a_rollout_that_cannot_work_is_refused_with_why(groups, staff_user, changes, says):
    asked = {"model": "sim-small", "from_group": "blue", "to_group": "green", **changes}
    with pytest.raises(BadInput, match=says):
        rollouts.start_rollout(actor=staff_user, **asked)
    assert not Rollout.objects.exists() and not ModelRoute.objects.exists()


def test_one_rollout_of_a_model_at_a_time(groups, staff_user):
    rollouts.start_rollout(model="sim-small", from_group="blue", to_group="green", actor=staff_user)
    with pytest.raises(BadInput, match="A rollout of sim-small is under way"):
        rollouts.start_rollout(model="sim-small", from_group="green", to_group="blue", actor=staff_user)


def test_the_figures_of_a_version_are_what_its_nodes_served_in_the_window(groups, user):
    since = timezone.now() - timedelta(minutes=5)
    green = _answers(user, "green-1", 3, ttft_ms=100)
    _answers(user, "green-1", 1, status=Message.Status.BLOCKED, ttft_ms=900)
    _answers(user, "blue-1", 5)  # the other version's
    _answers(user, "green-1", 2, ago=timedelta(minutes=30))  # before the window
    AnswerFeedback.objects.create(message=green[0], user=user, rating="down")
    AnswerFeedback.objects.create(message=green[1], user=user, rating="up")
    for failed in (True, False, False, False):
        async_to_sync(version_stats.count)("green-1", failed=failed)

    figures = version_figures("sim-small", "green", since)

    assert (figures.answers, figures.blocked, figures.rated, figures.thumbs_down) == (4, 1, 2, 1)
    assert (figures.sent, figures.failed) == (4, 1) and figures.error_rate == 0.25
    assert figures.ttft_p95_ms == 900 and figures.block_rate == 0.25 and figures.thumbs_down_rate == 0.5
    # 50 tokens in 1.2 s less 0.1 s to the first: 45.5 a second, for each of the three completed answers.
    assert figures.tokens_per_second == pytest.approx(50 / 1.1)


def test_a_step_whose_gates_pass_gives_the_new_version_the_next_share(groups, user, staff_user):
    conducted = _started(staff_user, steps=[10, 100], max_ttft_p95_ms=500)
    _answers(user, "green-1", 4)

    assert rollouts.check_rollout(conducted) == "advanced"
    assert conducted.share == 100 and _weights() == {"blue": 0, "green": 100}
    advance = AuditEntry.objects.get(action="rollouts.advance")
    assert advance.actor is None and advance.details["share"] == 100 and advance.details["figures"]["answers"] == 4

    Rollout.objects.filter(pk=conducted.pk).update(step_started=timezone.now() - timedelta(seconds=61))
    conducted.refresh_from_db()
    _answers(user, "green-1", 4)
    assert rollouts.check_rollout(conducted) == "completed"
    conducted.refresh_from_db()
    assert conducted.status == "completed" and conducted.finished and _weights() == {"blue": 0, "green": 100}


def test_a_step_is_judged_only_after_its_window_and_on_enough_answers(groups, user, staff_user):
    conducted = rollouts.start_rollout(
        model="sim-small", from_group="blue", to_group="green", actor=staff_user, window_seconds=60, min_answers=4
    )
    _answers(user, "green-1", 4)
    assert rollouts.check_rollout(conducted) == "watching"  # the window has not passed
    conducted = _started_again(conducted)
    Message.objects.all().delete()
    _answers(user, "green-1", 2)
    assert rollouts.check_rollout(conducted) == "watching"
    conducted.refresh_from_db()
    assert conducted.reason == "Waiting for answers from green: 2 of 4." and conducted.share == 1


def _started_again(conducted: Rollout) -> Rollout:
    Rollout.objects.filter(pk=conducted.pk).update(step_started=timezone.now() - timedelta(seconds=61))
    conducted.refresh_from_db()
    return conducted


def test_a_failing_gate_rolls_back_at_once_and_says_why(groups, user, staff_user):
    conducted = _started(staff_user, steps=[25, 100], max_error_rate=0.1)
    _answers(user, "green-1", 4)
    for failed in (True, True, False, False, False):
        async_to_sync(version_stats.count)("green-1", failed=failed)

    assert rollouts.check_rollout(conducted) == "rolled back"

    conducted.refresh_from_db()
    assert conducted.status == "rolled_back" and conducted.share == 0 and _weights() == {"blue": 100, "green": 0}
    assert conducted.reason == "Error rate 40.0% (2 of 5 requests) is over 10.0%."
    entry = AuditEntry.objects.get(action="rollouts.roll_back")
    assert entry.actor is None and entry.reason == conducted.reason and entry.details["figures"]["failed"] == 2


def test_a_rollout_set_to_hold_stops_at_its_step_until_staff_resume_it(groups, user, staff_user):
    conducted = _started(staff_user, steps=[25, 100], max_ttft_p95_ms=300, on_failure=Rollout.OnFailure.HOLD)
    _answers(user, "green-1", 4, ttft_ms=800)

    assert rollouts.check_rollout(conducted) == "held"
    conducted.refresh_from_db()
    assert conducted.status == "held" and _weights() == {"blue": 75, "green": 25}  # the step's share is kept
    assert conducted.reason == "Time to first token p95 800 ms is over 300 ms."
    assert rollouts.check_rollout(conducted) == "held"  # nothing happens while held

    rollouts.resume(conducted, actor=staff_user)
    conducted.refresh_from_db()
    assert conducted.status == "running" and AuditEntry.objects.filter(action="rollouts.resume").count() == 1
    rollouts.roll_back(conducted, reason="Not today.", actor=staff_user)
    assert _weights() == {"blue": 100, "green": 0}
    assert AuditEntry.objects.get(action="rollouts.roll_back").actor == staff_user


def test_the_eval_gate_waits_for_both_runs_then_holds_the_new_version_to_the_old_ones_score(groups, user, staff_user):
    eval_set = EvalSet.objects.create(name="Harbour facts")
    conducted = _started(staff_user, steps=[50, 100], eval_tolerance=0.1)
    before = EvalRun.objects.create(eval_set=eval_set, model="sim-small", node_group="blue", items_total=4)
    after = EvalRun.objects.create(eval_set=eval_set, model="sim-small", node_group="green", items_total=4)
    Rollout.objects.filter(pk=conducted.pk).update(eval_set=eval_set, before_eval=before, after_eval=after)
    conducted.refresh_from_db()
    _answers(user, "green-1", 4)

    assert rollouts.check_rollout(conducted) == "watching"
    conducted.refresh_from_db()
    assert conducted.reason == "Waiting for the eval runs (0 of 8 items)."

    EvalRun.objects.filter(pk=before.pk).update(status="completed", items_done=4, score_sum=4.0)
    EvalRun.objects.filter(pk=after.pk).update(status="completed", items_done=4, score_sum=3.0)
    assert rollouts.check_rollout(conducted) == "rolled back"
    conducted.refresh_from_db()
    assert conducted.reason == "Eval score 75.0% on green is under blue's 100.0% less 10.0%."


def test_each_rating_is_counted_by_the_version_that_wrote_the_answer(groups, user):
    (answer,) = _answers(user, "green-1", 1)
    labels = {"model": "sim-small", "node": "green-1", "rating": "down"}
    before = REGISTRY.get_sample_value("sglchat_answer_ratings_total", labels) or 0.0

    rate_answer(user, answer.pk, "down", "It is wrong.")

    assert REGISTRY.get_sample_value("sglchat_answer_ratings_total", labels) == before + 1


def test_behind_the_gateway_a_rollout_is_refused_as_its_weights_would_not_reach_it(groups, staff_user, settings):
    settings.INFERENCE_ROUTING = "gateway"
    with pytest.raises(BadInput, match="Behind the SGLang Model Gateway the gateway routes every request"):
        rollouts.start_rollout(model="sim-small", from_group="blue", to_group="green", actor=staff_user)
    assert not Rollout.objects.exists()


def test_a_decision_taken_meanwhile_is_never_undone_by_the_beat(groups, user, staff_user):
    """Staff roll back while the beat is judging the same step: the beat's advance does not reach the weights."""
    conducted = _started(staff_user, steps=[25, 100])
    _answers(user, "green-1", 4)
    judged_by_the_beat = Rollout.objects.get(pk=conducted.pk)  # read before staff act

    rollouts.roll_back(conducted, reason="Not today.", actor=staff_user)

    assert rollouts.check_rollout(judged_by_the_beat) == "rolled_back"
    assert _weights() == {"blue": 100, "green": 0}
    assert not AuditEntry.objects.filter(action="rollouts.advance").exists()
    with pytest.raises(BadInput, match="has ended meanwhile"):
        rollouts.roll_back(judged_by_the_beat, reason="Twice.", actor=staff_user)


def test_while_the_evals_run_the_other_gates_still_roll_back(groups, user, staff_user):
    eval_set = EvalSet.objects.create(name="Harbour facts")
    conducted = _started(staff_user, steps=[50, 100], max_error_rate=0.1)
    pending = [
        EvalRun.objects.create(eval_set=eval_set, model="sim-small", node_group=group, items_total=4)
        for group in ("blue", "green")
    ]
    Rollout.objects.filter(pk=conducted.pk).update(eval_set=eval_set, before_eval=pending[0], after_eval=pending[1])
    conducted.refresh_from_db()
    _answers(user, "green-1", 4)
    for failed in (True, True, False, False):
        async_to_sync(version_stats.count)("green-1", failed=failed)

    assert rollouts.check_rollout(conducted) == "rolled back"
    assert conducted.reason.startswith("Error rate 50.0%")


def test_too_few_requests_are_never_judged_even_when_one_failed(groups, user, staff_user):
    conducted = _started(staff_user, steps=[25, 100], min_answers=4, max_error_rate=0.05)
    _answers(user, "green-1", 1)
    async_to_sync(version_stats.count)("green-1", failed=True)
    async_to_sync(version_stats.count)("green-1", failed=False)

    assert rollouts.check_rollout(conducted) == "watching"
    assert conducted.reason == "Waiting for answers from green: 2 of 4." and _weights() == {"blue": 75, "green": 25}


def test_a_rollout_with_an_empty_eval_set_is_refused(groups, staff_user):
    with pytest.raises(BadInput, match="has no items yet"):
        rollouts.start_rollout(
            model="sim-small",
            from_group="blue",
            to_group="green",
            eval_set=EvalSet.objects.create(name="Empty"),
            actor=staff_user,
        )

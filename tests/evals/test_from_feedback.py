"""Eval items from rated answers: a thumbs down with a comment becomes a judge item on that comment, a
thumbs up a similarity item held to the liked answer; copying people's questions needs a reason, recorded."""

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from audit.services import ReasonRequired
from chat.models import AnswerFeedback
from evals.models import EvalItem, EvalSet
from evals.services import FROM_THUMBS_DOWN, items_from_feedback
from tests.chat.factories import conversation_for, exchange
from tests.support.accounts import make_staff, signed_in

pytestmark = pytest.mark.django_db


def _rated(user, question: str, answer: str, rating: str, comment: str = "") -> AnswerFeedback:
    _, said = exchange(conversation_for(user), question, answer)
    return AnswerFeedback.objects.create(user=user, message=said, rating=rating, comment=comment)


def test_rated_answers_become_items_and_the_copy_is_recorded_with_its_reason(user, staff_user):
    _rated(user, "When did the harbour open?", "In 1900.", "down", "Wrong: it opened in 1862.")
    _rated(user, "Who keeps the lighthouse?", "Ada, since 1990.", "up")
    _rated(user, "Is the tide high?", "Maybe.", "down")  # no comment: says too little
    eval_set = EvalSet.objects.create(name="From people")

    added = items_from_feedback(
        eval_set, AnswerFeedback.objects.all(), reason="Regression set for v2", actor=staff_user
    )

    assert added == 2
    down, up = EvalItem.objects.filter(eval_set=eval_set).order_by("position")
    assert (down.prompt, down.scorer) == ("When did the harbour open?", "judge")
    assert down.reference == FROM_THUMBS_DOWN.format(comment="Wrong: it opened in 1862.")
    assert (up.prompt, up.scorer, up.reference) == ("Who keeps the lighthouse?", "similarity", "Ada, since 1990.")
    entry = AuditEntry.objects.get(action="evals.from_feedback")
    assert entry.actor == staff_user and entry.reason == "Regression set for v2"
    assert entry.details == {"eval_set": "From people", "passed_over": 1, "rows": 2}


def test_without_a_reason_nothing_is_copied(user, staff_user):
    _rated(user, "When did the harbour open?", "In 1900.", "down", "It opened in 1862.")
    eval_set = EvalSet.objects.create(name="From people")
    with pytest.raises(ReasonRequired):
        items_from_feedback(eval_set, AnswerFeedback.objects.all(), reason="  ", actor=staff_user)
    assert not EvalItem.objects.exists() and not AuditEntry.objects.filter(action="evals.from_feedback").exists()


def test_staff_add_items_from_rated_answers_in_the_console(user):
    _rated(user, "When did the harbour open?", "In 1900.", "down", "It opened in 1862.")
    _rated(user, "Who keeps the lighthouse?", "Ada.", "up")
    console = signed_in(make_staff("evaluator@example.com", is_superuser=True))
    eval_set = EvalSet.objects.create(name="From people")
    url = reverse("admin:evals_evalset_from_feedback", args=[eval_set.pk])
    assert console.get(url).status_code == 200
    form = {"rating": "down", "model": "", "days": "30", "most": "100"}

    refused = console.post(url, {**form, "reason": ""})
    assert refused.status_code == 200 and not EvalItem.objects.exists()

    done = console.post(url, {**form, "reason": "Regression set"}, follow=True)
    assert "1 item added to From people from rated answers." in done.content.decode()
    assert list(EvalItem.objects.values_list("scorer", flat=True)) == ["judge"]

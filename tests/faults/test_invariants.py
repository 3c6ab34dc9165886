"""The invariant checker itself fails on each broken promise (a checker that cannot fail proves nothing)."""

import pytest

from billing import services as billing
from billing.quota_store import get_store
from billing.selectors import current_period
from chat.models import Message
from tests.chat.factories import conversation_for, say
from tests.faults.invariants import Accepted, assert_invariants
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db(transaction=True)


def _answered(user, accepted: Accepted, *, settle: bool = True) -> Message:
    """A question and its answer, with the reservation and the ledger row a real turn has."""
    conversation = conversation_for(user)
    question = say(conversation, "user", "Hello?")
    reservation = billing.reserve_quota(user, 100, model="sim-small")
    answer = say(
        conversation, "assistant", "Hi.", parent=question, model="sim-small", prompt_tokens=10, completion_tokens=5
    )
    if settle:
        billing.settle(
            reservation,
            prompt_tokens=10,
            cached_tokens=0,
            completion_tokens=5,
            model="sim-small",
            generation_id=answer.pk,
            conversation_id=conversation.pk,
            user=user,
        )
    accepted.turns.append((question.pk, "Hello?", answer.pk))
    return answer


@pytest.fixture
def customer(user):
    put_on_plan(user, "pro")
    return user


def test_a_consistent_state_passes(customer):
    accepted = Accepted()
    _answered(customer, accepted)
    assert_invariants([customer], accepted)


def test_an_answer_left_streaming_fails(customer):
    accepted = Accepted()
    answer = _answered(customer, accepted)
    Message.objects.filter(pk=answer.pk).update(status=Message.Status.STREAMING)
    with pytest.raises(AssertionError, match="final state"):
        assert_invariants([customer], accepted, settle_timeout=0.5)


def test_a_lost_user_message_fails(customer):
    accepted = Accepted()
    _answered(customer, accepted)
    accepted.turns.append((10**9, "Never stored", 10**9))
    with pytest.raises(AssertionError, match="is gone"):
        assert_invariants([customer], accepted)


def test_an_answer_without_its_ledger_row_fails(customer):
    accepted = Accepted()
    _answered(customer, accepted, settle=False)
    with pytest.raises(AssertionError, match="0 ledger rows"):
        assert_invariants([customer], accepted)


def test_a_ledger_row_for_an_answer_that_generated_nothing_fails(customer):
    accepted = Accepted()
    answer = _answered(customer, accepted)
    Message.objects.filter(pk=answer.pk).update(content="", prompt_tokens=0, completion_tokens=0)
    with pytest.raises(AssertionError, match="has 1 ledger rows, not 0"):
        assert_invariants([customer], accepted)


def test_a_ledger_row_that_differs_from_its_answers_counts_fails(customer):
    accepted = Accepted()
    answer = _answered(customer, accepted)
    Message.objects.filter(pk=answer.pk).update(completion_tokens=6)
    with pytest.raises(AssertionError, match="does not match its counts"):
        assert_invariants([customer], accepted)


def test_a_reservation_still_held_fails(customer):
    accepted = Accepted()
    _answered(customer, accepted)
    billing.reserve_quota(customer, 50, model="sim-small")  # never settled nor released
    with pytest.raises(AssertionError, match="still held"):
        assert_invariants([customer], accepted)


def test_a_counter_that_drifted_from_the_ledger_fails(customer):
    accepted = Accepted()
    _answered(customer, accepted)
    period = current_period(customer).period
    get_store().client.hincrby(get_store().key(customer.pk, period.key), "used", 7)
    with pytest.raises(AssertionError, match="counter says"):
        assert_invariants([customer], accepted)

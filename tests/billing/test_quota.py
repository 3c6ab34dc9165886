"""Quotas: reservations against the period's allowance, settlement into the ledger, Redis as its cache.

Run on the real Redis (and, for the in-process store of the embedded default, without it). These
tests use committed transactions (transactional_db) because settlement updates the counters only
once the ledger row is committed, and the concurrency tests run in threads with their own connections.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from billing import selectors
from billing.models import Plan, UsageRecord
from billing.quota_store import get_store
from billing.services import release, reserve_quota, settle
from billing.services.quota import ensure_counter
from config.refusals import QuotaExceeded, RateLimited
from tests.billing.conftest import subscribe

pytestmark = pytest.mark.django_db(transaction=True)


def spend(user, tokens: int, *, model: str = "sim-small") -> UsageRecord:
    """Usage already in the ledger (as if earlier generations had settled)."""
    reservation = reserve_quota(user, tokens, model=model)
    return settle(reservation, prompt_tokens=tokens, cached_tokens=0, completion_tokens=0, model=model)


def counter(user) -> tuple[int | None, int]:
    period = selectors.current_period(user).period
    return get_store().snapshot(user.pk, period.key)


def race(workers: int, reserve, refusal: type[Exception]) -> tuple[list, int]:
    """`reserve` from `workers` threads released at once: what was admitted, and how many were refused
    with `refusal`. Any other failure in a thread fails the test instead of vanishing."""
    start = threading.Barrier(workers)
    admitted, refused, errors = [], [], []

    def request():
        try:
            start.wait()
            try:
                admitted.append(reserve())
            except refusal:
                refused.append(1)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=request) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return admitted, len(refused)


def small_quota(plans, allowance: int) -> None:
    # These tests are about tokens: as many answers at once as they start.
    Plan.objects.filter(slug="free").update(tokens_per_month=allowance, answers_at_once=100)


def test_a_reservation_that_fits_is_admitted_and_one_that_does_not_is_refused_naming_the_upgrade(
    plans, free_user, store_kind
):
    small_quota(plans, 1_000)
    spend(free_user, 900)

    reservation = reserve_quota(free_user, 100, model="sim-small")
    assert reservation.amount == 100

    with pytest.raises(QuotaExceeded) as refused:
        reserve_quota(free_user, 1, model="sim-small")
    refusal = refused.value
    assert refusal.status == 429
    assert "only 0 of the 1,000 tokens in your Free plan are left" in refusal.message
    assert "100 are held by requests still running" in refusal.message
    assert "Plus includes 5,000,000 tokens a month" in refusal.message
    assert refusal.retry_after > 0
    assert refusal.details["upgrade"] == "plus"


@pytest.mark.parametrize("workers", [50])
def test_concurrent_reservations_against_a_nearly_spent_quota_admit_only_what_fits(
    plans, free_user, store_kind, workers
):
    # Given 9,000 of 10,000 tokens spent, when 50 requests of 150 tokens each race for the rest,
    small_quota(plans, 10_000)
    spend(free_user, 9_000)
    admitted, refused = race(workers, lambda: reserve_quota(free_user, 150, model="sim-small"), QuotaExceeded)

    # then exactly the six that fit in the 1,000 left are admitted (6 x 150 = 900; a seventh would overspend).
    assert (len(admitted), refused) == (6, 44)
    assert counter(free_user) == (9_000, 900)

    # And settling them (concurrently, using less than reserved) writes one ledger row each,
    def finish(reservation, n):
        try:
            settle(
                reservation,
                prompt_tokens=40,
                cached_tokens=20,
                completion_tokens=60 + n,
                model="sim-small",
                generation_id=f"gen-{n}",
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=finish, args=(r, n)) for n, r in enumerate(admitted)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    rows = UsageRecord.objects.filter(generation_id__startswith="gen-")
    assert rows.count() == len(admitted)
    # and the period's total is the sum of the ledger rows, which the counter agrees with.
    period = selectors.current_period(free_user).period
    ledger_sum = sum(UsageRecord.objects.filter(user=free_user).values_list("billable_tokens", flat=True))
    assert selectors.ledger_total(free_user.pk, period) == ledger_sum == 9_000 + sum(20 + 10 + 60 + n for n in range(6))
    assert counter(free_user) == (ledger_sum, 0)


def test_settling_twice_writes_one_ledger_row_and_counts_once(plans, free_user, store_kind):
    reservation = reserve_quota(free_user, 500, model="sim-small")

    first = settle(
        reservation,
        prompt_tokens=100,
        cached_tokens=0,
        completion_tokens=50,
        model="sim-small",
        node="node-a",
        conversation_id=7,
        generation_id=42,
    )
    again = settle(
        reservation,
        prompt_tokens=100,
        cached_tokens=0,
        completion_tokens=50,
        model="sim-small",
        node="node-a",
        conversation_id=7,
        generation_id=42,
    )

    assert first.pk == again.pk
    assert UsageRecord.objects.filter(generation_id="42").count() == 1
    assert (first.conversation_id, first.node, first.plan_slug) == (7, "node-a", "free")
    assert counter(free_user) == (150, 0)


def test_a_generation_settled_under_a_second_reservation_is_still_billed_once(plans, free_user, store_kind):
    one = reserve_quota(free_user, 500, model="sim-small")
    two = reserve_quota(free_user, 500, model="sim-small")

    settle(one, prompt_tokens=100, cached_tokens=0, completion_tokens=50, model="sim-small", generation_id="g1")
    settle(two, prompt_tokens=100, cached_tokens=0, completion_tokens=50, model="sim-small", generation_id="g1")

    assert UsageRecord.objects.filter(user=free_user).count() == 1
    assert counter(free_user) == (150, 0)  # the second reservation's hold is given back, nothing counted twice


def test_release_gives_the_reservation_back_and_bills_nothing(plans, free_user, store_kind):
    small_quota(plans, 1_000)
    reservation = reserve_quota(free_user, 1_000, model="sim-small")
    with pytest.raises(QuotaExceeded):
        reserve_quota(free_user, 1, model="sim-small")

    release(reservation)

    assert reserve_quota(free_user, 1_000, model="sim-small").amount == 1_000
    assert not UsageRecord.objects.exists()


def test_a_reservation_never_settled_expires(plans, free_user, store_kind, settings):
    small_quota(plans, 1_000)
    now = timezone.now()
    reserve_quota(free_user, 1_000, model="sim-small", now=now)
    with pytest.raises(QuotaExceeded):
        reserve_quota(free_user, 1, model="sim-small", now=now + timedelta(seconds=10))

    later = now + timedelta(seconds=settings.BILLING_RESERVATION_TTL_SECONDS + 1)
    assert reserve_quota(free_user, 1_000, model="sim-small", now=later).amount == 1_000


def test_cached_prompt_tokens_count_at_the_configured_discount(plans, free_user, store_kind, settings):
    settings.BILLING_CACHED_TOKEN_DISCOUNT_PERCENT = 75
    record = settle(
        reserve_quota(free_user, 2_000, model="sim-small"),
        prompt_tokens=1_000,
        cached_tokens=800,
        completion_tokens=100,
        model="sim-small",
    )

    # 200 uncached + 800 cached at a quarter of the price + 100 completion.
    assert record.billable_tokens == 200 + 200 + 100
    assert counter(free_user) == (500, 0)


def test_a_lost_redis_counter_is_rebuilt_from_the_ledger(plans, free_user):
    small_quota(plans, 1_000)
    spend(free_user, 700)
    get_store().client.flushdb()  # Redis restarted empty

    with pytest.raises(QuotaExceeded):
        reserve_quota(free_user, 301, model="sim-small")
    assert reserve_quota(free_user, 300, model="sim-small").amount == 300
    assert counter(free_user) == (700, 300)


def test_usage_settled_in_a_transaction_that_rolls_back_is_never_counted(plans, free_user, store_kind):
    reservation = reserve_quota(free_user, 500, model="sim-small")
    ensure_counter(free_user.pk, selectors.current_period(free_user).period)

    with pytest.raises(RuntimeError), transaction.atomic():
        settle(reservation, prompt_tokens=100, cached_tokens=0, completion_tokens=50, model="sim-small")
        raise RuntimeError("the message could not be saved")

    assert not UsageRecord.objects.exists()
    assert counter(free_user)[0] == 0


def test_period_totals_come_from_the_ledger_alone(plans, free_user):
    # Given usage last month and this month,
    now = timezone.now()
    period = selectors.current_period(free_user, now).period
    for created, tokens in ((period.start - timedelta(seconds=1), 5_000), (period.start, 300), (now, 200)):
        UsageRecord.objects.create(
            user=free_user,
            reservation_id=uuid.uuid4().hex,
            generation_id=uuid.uuid4().hex,
            plan_slug="free",
            model="sim-small",
            prompt_tokens=tokens,
            completion_tokens=0,
            billable_tokens=tokens,
            created=created,
        )

    # then the period's total counts only this period's rows, with no counter in Redis at all.
    assert get_store().snapshot(free_user.pk, period.key) == (None, 0)
    assert selectors.ledger_total(free_user.pk, period) == 500
    assert selectors.usage_summary(free_user, now).billable_tokens == 500


def test_a_pro_subscriber_reserves_against_the_pro_allowance_of_their_own_period(plans, free_user):
    subscribe(free_user, plans["pro"], days_left=10)
    billing = selectors.current_period(free_user)

    reservation = reserve_quota(free_user, 1_000_000, model="sim-large")  # far beyond Free's 200,000

    assert billing.plan.slug == "pro"
    assert reservation.period_key == billing.period.key
    assert billing.period.end - timezone.now() < timedelta(days=10, minutes=1)


def test_a_reservation_survives_being_stored_as_json_and_settled_elsewhere(plans, free_user):
    reservation = reserve_quota(free_user, 300, model="sim-small", api_key_id=9)
    stored = reservation.as_dict()

    record = settle(
        type(reservation).from_dict(stored), prompt_tokens=10, cached_tokens=0, completion_tokens=5, model="sim-small"
    )

    assert record.api_key_id == 9
    assert counter(free_user) == (15, 0)


def test_one_more_answer_than_the_plan_allows_at_once_is_refused_until_one_ends(plans, free_user, store_kind):
    first = reserve_quota(free_user, 10, model="sim-small")
    second = reserve_quota(free_user, 10, model="sim-small")

    with pytest.raises(RateLimited) as refused:
        reserve_quota(free_user, 10, model="sim-small")
    refusal = refused.value
    assert (refusal.status, refusal.code, refusal.retry_after) == (429, "rate_limited", 3)
    assert refusal.message == (
        "You already have 2 answers being written, the most the Free plan allows at once. Another can start as soon "
        "as one of them finishes (Plus allows 4 at once)."
    )
    assert counter(free_user)[1] == 20  # the refused one holds nothing

    release(first)  # a stopped or refused answer gives its place back
    third = reserve_quota(free_user, 10, model="sim-small")
    settle(second, prompt_tokens=5, cached_tokens=0, completion_tokens=5, model="sim-small")  # so does a finished one
    reserve_quota(free_user, 10, model="sim-small")
    with pytest.raises(RateLimited):
        reserve_quota(free_user, 10, model="sim-small")
    assert third.amount == 10


def test_work_that_is_not_an_answer_holds_tokens_but_not_a_place_among_answers_at_once(plans, free_user, store_kind):
    """A file's passages being embedded (documents.ingestion) while two answers are written."""
    reserve_quota(free_user, 10, model="sim-small")
    reserve_quota(free_user, 10, model="sim-small")
    file_batch = reserve_quota(free_user, 30, model="sim-embed", answer=False)
    assert counter(free_user)[1] == 50  # its tokens are held like any
    with pytest.raises(RateLimited):
        reserve_quota(free_user, 10, model="sim-small")
    release(file_batch)


def test_racing_requests_get_exactly_the_plans_answers_at_once(plans, free_user, store_kind):
    Plan.objects.filter(slug="free").update(answers_at_once=4)
    workers = 30
    admitted, refused = race(workers, lambda: reserve_quota(free_user, 10, model="sim-small"), RateLimited)

    assert (len(admitted), refused) == (4, workers - 4)
    assert counter(free_user)[1] == 40


def test_a_plan_can_price_cached_prompt_tokens_itself(plans, free_user, pro_user, store_kind, settings):
    """A plan's own cached-token discount wins over the product's default; each ledger row is priced by
    the plan of the period it counts in, and keeps that figure."""
    settings.BILLING_CACHED_TOKEN_DISCOUNT_PERCENT = 50
    Plan.objects.filter(slug="pro").update(cached_token_discount_percent=90)
    figures = {"prompt_tokens": 1_000, "cached_tokens": 800, "completion_tokens": 100, "model": "sim-small"}

    on_free = settle(reserve_quota(free_user, 2_000, model="sim-small"), **figures)
    on_pro = settle(reserve_quota(pro_user, 2_000, model="sim-small"), **figures)

    assert on_free.billable_tokens == 200 + 400 + 100  # the default: cached at half
    assert on_pro.billable_tokens == 200 + 80 + 100  # Pro's own: cached at a tenth
    Plan.objects.filter(slug="pro").update(cached_token_discount_percent=0)
    on_pro.refresh_from_db()
    assert on_pro.billable_tokens == 380  # written once, at the price of its moment

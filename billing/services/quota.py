"""Quotas: reserve before a generation, settle (or release) after it, and the ledger row in between.

A reservation holds the most a request can use (prompt + max output tokens) against the period's
allowance, atomically, so concurrent requests at the edge of a quota cannot together overspend: each
is admitted only if it fits next to what is settled and what the others hold. Settling writes the
one ledger row for the generation and swaps the hold for the real figure.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from billing import ledger, selectors
from billing.models import CounterReconciliation, UsageRecord
from billing.periods import Period
from billing.pricing import billable_cached_answer, billable_embedding_tokens, billable_tokens
from billing.quota_store import CounterUpdate, get_store
from config.refusals import Busy, QuotaExceeded, RateLimited
from config.text import grouped

logger = logging.getLogger(__name__)

# Counters outlive their period by this long, so a settlement arriving late still finds them.
COUNTER_TTL_AFTER_PERIOD = 7 * 24 * 3600
# A counter rebuilt from the ledger can vanish again before the reservation reads it only under a
# Redis in trouble (evicting or flushing); after this many rebuilds the request is answered 503.
REBUILD_TRIES = 3
#: The `at_once` ceiling of a reservation that is not an answer: never reached.
NOT_COUNTED_AT_ONCE = 2**31 - 1


@dataclass(frozen=True)
class Reservation:
    """Tokens held for one request; plain data, so it can be stored with the message and settled elsewhere."""

    id: str
    user_id: int
    period_key: int
    amount: int
    model: str
    expires_at: float
    api_key_id: int | None = None
    #: The part of `amount` that is the prompt, as estimated (billed only if the engine never says).
    prompt_tokens: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Reservation:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


def _counter_ttl(period: Period, now: datetime) -> int:
    return max(int((period.end - now).total_seconds()), 0) + COUNTER_TTL_AFTER_PERIOD


def ensure_counter(user_id: int, period: Period, now: datetime | None = None) -> int:
    """The settled-tokens counter for the period, rebuilt from the ledger if Redis lost it."""
    now = now or timezone.now()
    _loaded, value = get_store().load(
        user_id, period.key, lambda: selectors.ledger_total(user_id, period), ttl=_counter_ttl(period, now)
    )
    return value


def _refusal(plan, period: Period, needed: int, used: int, held: int) -> QuotaExceeded:
    left = max(plan.tokens_per_month - used - held, 0)
    resets = date_format(timezone.localtime(period.end), "j M Y")
    values = {
        "needed": grouped(needed),
        "left": grouped(left),
        "allowance": grouped(plan.tokens_per_month),
        "plan": plan.name,
        "held": grouped(held),
    }
    if held:
        first = _(
            "This request may use up to %(needed)s tokens, but only %(left)s of the %(allowance)s tokens in your "
            "%(plan)s plan are left this period (%(held)s are held by requests still running)."
        )
    else:
        first = _(
            "This request may use up to %(needed)s tokens, but only %(left)s of the %(allowance)s tokens in your "
            "%(plan)s plan are left this period."
        )
    sentences = [first % values, _("The allowance renews on %(date)s.") % {"date": resets}]
    better = selectors.cheapest_plan_with_more(plan, "tokens_per_month")
    if better is not None:
        sentences.append(
            _("%(plan)s includes %(tokens)s tokens a month.")
            % {"plan": better.name, "tokens": grouped(better.tokens_per_month)}
        )
    message = " ".join(sentences)
    retry_after = max(int((period.end - timezone.now()).total_seconds()), 1)
    return QuotaExceeded(
        message,
        retry_after=retry_after,
        plan=plan.slug,
        allowance=plan.tokens_per_month,
        used=used,
        held=held,
        remaining=left,
        upgrade=better.slug if better else None,
    )


#: When one of a person's answers ends is not known, so no time is promised: this is how often a program
#: (or the chat page, which waits and sends by itself) may ask again.
AT_ONCE_RETRY_AFTER_SECONDS = 3


def _too_many_at_once(plan) -> RateLimited:
    limit = plan.answers_at_once
    first = ngettext(
        "You already have %(count)s answer being written, the most the %(plan)s plan allows at once.",
        "You already have %(count)s answers being written, the most the %(plan)s plan allows at once.",
        limit,
    ) % {"count": limit, "plan": plan.name}
    better = selectors.cheapest_plan_with_more(plan, "answers_at_once")
    if better is not None:
        then = _("Another can start as soon as one of them finishes (%(plan)s allows %(count)s at once).") % {
            "plan": better.name,
            "count": better.answers_at_once,
        }
    else:
        then = _("Another can start as soon as one of them finishes.")
    return RateLimited(
        f"{first} {then}", retry_after=AT_ONCE_RETRY_AFTER_SECONDS, limit=limit, plan=plan.slug, scope="answers_at_once"
    )


def reserve_quota(
    user,
    estimate_tokens: int,
    *,
    model: str,
    api_key_id: int | None = None,
    now: datetime | None = None,
    period: selectors.BillingPeriod | None = None,
    prompt_tokens: int = 0,
    answer: bool = True,
) -> Reservation:
    """Hold `estimate_tokens` (prompt + max output) against this period's allowance, or raise QuotaExceeded;
    or RateLimited when the user already has the plan's `answers_at_once` reservations (answers being
    written, on any transport) held.

    `period` is the user's billing period when the caller has already looked it up for this request.
    `answer=False`: work that is not an answer being written (a file's passages embedded while it is
    read) holds tokens without counting against the plan's answers at once.
    """
    if estimate_tokens < 0:
        raise ValueError("A reservation cannot be negative.")
    now = now or timezone.now()
    billing = period or selectors.current_period(user, now)
    period, plan = billing.period, billing.plan
    rid = uuid.uuid4().hex
    ttl = settings.BILLING_RESERVATION_TTL_SECONDS
    store = get_store()
    for _attempt in range(REBUILD_TRIES):
        hold = store.reserve(
            user.pk,
            period.key,
            rid,
            estimate_tokens,
            plan.tokens_per_month,
            now=now.timestamp(),
            expires_at=now.timestamp() + ttl,
            ttl=_counter_ttl(period, now),
            at_once=plan.answers_at_once if answer else NOT_COUNTED_AT_ONCE,
        )
        if hold is not None:
            break
        ensure_counter(user.pk, period, now)  # Redis lost the counter (or it is a new period): rebuild it
    else:
        raise Busy(_("Your usage could not be checked just now. Try again in a few seconds."), retry_after=5)
    if hold.too_many:
        raise _too_many_at_once(plan)
    if not hold.admitted:
        raise _refusal(plan, period, estimate_tokens, hold.used, hold.held)
    return Reservation(
        id=rid,
        user_id=user.pk,
        period_key=period.key,
        amount=estimate_tokens,
        model=model,
        expires_at=now.timestamp() + ttl,
        api_key_id=api_key_id,
        prompt_tokens=prompt_tokens,
    )


@dataclass(frozen=True)
class TokenWindow:
    """Where a user stands in the period's token allowance: what is left after the tokens settled and
    those held by answers still being written, and the seconds until the period (and the allowance) renews."""

    limit: int
    remaining: int
    reset_seconds: float


def token_window(
    user, *, period: selectors.BillingPeriod | None = None, now: datetime | None = None
) -> TokenWindow | None:
    """Read the figures `reserve_quota` decides on, without holding or writing anything (a counter
    Redis lost is read from the ledger, not rebuilt: rebuilding is the next reservation's). None when
    the store cannot be reached."""
    now = now or timezone.now()
    billing = period or selectors.current_period(user, now)
    try:
        used, held = get_store().snapshot(user.pk, billing.period.key)
    except redis.RedisError:
        return None
    if used is None:
        used = selectors.ledger_total(user.pk, billing.period)
    allowance = billing.plan.tokens_per_month
    return TokenWindow(
        limit=allowance,
        remaining=max(allowance - used - held, 0),
        reset_seconds=max((billing.period.end - now).total_seconds(), 0.0),
    )


def settle(
    reservation: Reservation,
    *,
    prompt_tokens: int,
    cached_tokens: int,
    completion_tokens: int,
    model: str,
    node: str = "",
    conversation_id: int | None = None,
    api_key_id: int | None = None,
    generation_id: str | int | None = None,
    now: datetime | None = None,
    user=None,
    period: selectors.BillingPeriod | None = None,
    embedding: bool = False,
    from_cache: bool = False,
    auto_route: str = "",
    closing: ledger.Closing | None = None,
    counters: list[CounterUpdate] | None = None,
) -> UsageRecord | None:
    """Write the generation's one ledger row and replace the reservation by the real figure.

    `closing`: the write this settlement goes with (a chat answer's final state), made in the same
    statement (billing.ledger); when it changes no row (someone else ended the answer), nothing is
    written or counted and None is returned.

    `from_cache`: the answer came from the response cache (no engine time), priced by the plan's
    `cached_answer_percent`. `auto_route`: why Auto chose `model`, kept for the console.

    `embedding`: the row is an embedding request's (its prompt tokens are its inputs, nothing is
    cached or completed), priced by `billable_embedding_tokens`.

    `period` is the billing period the request was admitted under, when the caller has it; it is
    used if `now` still falls inside it (else the period is looked up: the answer ended in the next).

    Idempotent: settling the same reservation or generation again returns the row already written
    and changes no counter. The counter is updated only once the row is committed (on_commit), so a
    rolled-back caller never leaves tokens counted that the ledger does not have. With `counters`,
    the update is added there once committed instead, for the caller to send with its own Redis
    work (`send_counter_updates`).
    """
    now = now or timezone.now()
    # The engine's own figures are trusted, except that cached tokens are part of the prompt.
    cached_tokens = min(cached_tokens, prompt_tokens)
    if embedding:
        if cached_tokens or completion_tokens:
            raise ValueError("An embedding request has input tokens only.")
        billable = billable_embedding_tokens(prompt_tokens)
    if user is None or user.pk != reservation.user_id:
        user = get_user_model().objects.get(pk=reservation.user_id)
    if period is not None and period.period.start <= now < period.period.end:
        billing = period
    else:
        billing = selectors.current_period(user, now)
    if from_cache:
        billable = billable_cached_answer(prompt_tokens, completion_tokens, plan=billing.plan)
    elif not embedding:
        # Priced by the plan of the period the tokens count in.
        billable = billable_tokens(prompt_tokens, cached_tokens, completion_tokens, plan=billing.plan)
    generation_id = str(generation_id if generation_id is not None else reservation.id)
    record = UsageRecord(
        user=user,
        reservation_id=reservation.id,
        generation_id=generation_id,
        conversation_id=conversation_id,
        api_key_id=api_key_id if api_key_id is not None else reservation.api_key_id,
        plan_slug=billing.plan.slug,
        model=model,
        node=node or "",
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        completion_tokens=completion_tokens,
        billable_tokens=billable,
        from_cache=from_cache,
        auto_route=auto_route,
        created=now,
    )
    written = ledger.write(record, closing)
    if not written.closed:
        return None
    created = written.inserted
    if not created:
        settled = (
            UsageRecord.objects.filter(reservation_id=reservation.id).first()
            or UsageRecord.objects.filter(generation_id=generation_id).first()
        )
        if settled is None:
            # The INSERT met a conflict that is not this generation's row (the id sequence behind a
            # restored table?): the ledger lacks this row. Said loudly; the hold is still given back.
            logger.error("usage of generation %s could not be written to the ledger: a conflicting row", generation_id)
        else:
            record = settled
            logger.info("usage for generation %s was already settled; nothing written", generation_id)

    update = CounterUpdate(
        user_id=reservation.user_id,
        reserved_in=reservation.period_key,
        rid=reservation.id,
        counted_in=billing.period.key,
        billable=record.billable_tokens,
        count=created,
        ttl=_counter_ttl(billing.period, now),
    )
    transaction.on_commit(lambda: _update_counter(update, counters))
    return record


def release(reservation: Reservation, *, counters: list[CounterUpdate] | None = None) -> None:
    """Give back a reservation whose request never reached the engine (nothing is billed); with
    `counters`, added there for the caller to send (`settle`)."""
    update = CounterUpdate(
        user_id=reservation.user_id,
        reserved_in=reservation.period_key,
        rid=reservation.id,
        counted_in=reservation.period_key,
        billable=0,
        count=False,
        ttl=COUNTER_TTL_AFTER_PERIOD,
    )
    _update_counter(update, counters)


def _update_counter(update: CounterUpdate, counters: list[CounterUpdate] | None) -> None:
    if counters is None:
        get_store().apply(update)
    else:
        counters.append(update)


def send_counter_updates(updates: list[CounterUpdate], pipe=None) -> None:
    """Apply `updates` (collected by `settle` or `release`): added to `pipe`, a Redis pipeline of the
    caller's that it then sends, or, without Redis (no pipeline), to this process's counters now."""
    store = get_store()
    for update in updates:
        if pipe is None:
            store.apply(update)
        else:
            store.queue(pipe, update)


def reconcile_counters(now: datetime | None = None) -> CounterReconciliation:
    """Set every user's current-period counter from the ledger, and record the ones that were wrong.

    Covers users with a counter in the store and users with ledger rows in the last two months. A
    counter that was missing is rebuilt; one that disagreed with the ledger is drift, logged and
    listed in the stored report (staff see it in the admin).
    """
    now = now or timezone.now()
    store = get_store()
    users = {user_id for user_id, _ in store.tracked()}
    users |= set(
        UsageRecord.objects.filter(created__gte=now - timedelta(days=62), user__isnull=False)
        .values_list("user_id", flat=True)
        .distinct()
    )
    report = CounterReconciliation(ran_at=now)
    for user in get_user_model().objects.filter(pk__in=users).order_by("pk"):
        period = selectors.current_period(user, now).period
        before, after = store.load(
            user.pk,
            period.key,
            lambda u=user, p=period: selectors.ledger_total(u.pk, p),
            ttl=_counter_ttl(period, now),
            replace=True,
        )
        report.checked += 1
        if before is None:
            report.rebuilt += 1
        elif before != after:
            report.drifted += 1
            report.drift_tokens += abs(before - after)
            report.details.append(
                {"user_id": user.pk, "period_start": period.start.isoformat(), "counter": before, "ledger": after}
            )
            logger.warning(
                "usage counter drift: user %s, period from %s: counter %s, ledger %s",
                user.pk,
                period.start.isoformat(),
                before,
                after,
            )
    report.save()
    return report


def anonymise_usage(user) -> tuple[str, int]:
    """Detach the user's ledger rows from them before the account is deleted; the figures stay for
    accounting under one anonymous id (random: nothing about the person can be read from it).

    Also drops the conversation and API key ids, which name things deleted with the account.
    Returns the anonymous id and how many rows it holds.
    """
    anonymous_id = f"deleted-{uuid.uuid4().hex}"
    rows = UsageRecord.objects.filter(user=user).update(
        user=None, anonymous_id=anonymous_id, conversation_id=None, api_key_id=None
    )
    return anonymous_id, rows

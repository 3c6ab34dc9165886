"""Reads: which plan a user has, what it allows, and what they have used."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import reduce
from operator import or_

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from billing.models import Plan, Subscription, UsageRecord
from billing.periods import Period, add_months, calendar_month, cycle_containing
from billing.seed import seed_plans
from config.text import grouped
from inference.catalogue import AUTO, ModelInfo, auto_models, available_models, embedding_models


@dataclass(frozen=True)
class BillingPeriod:
    plan: Plan
    period: Period
    subscription: Subscription | None


def default_plan() -> Plan:
    """The plan of everyone without a paid subscription (seeded as Free).

    Every user must have a plan, so an emptied plan table is re-seeded rather than answered with None.
    """
    plan = Plan.objects.filter(is_default=True).first()
    if plan is None:
        seed_plans(Plan)
        plan = Plan.objects.filter(is_default=True).first() or Plan.objects.order_by("monthly_price_cents").first()
    return plan


def granting_subscription(user, now: datetime | None = None) -> Subscription | None:
    """The subscription that decides the user's plan: the richest one that grants a plan now."""
    if user is None or not user.is_authenticated:
        return None
    return (
        Subscription.objects.granting(now)
        .filter(user=user)
        .select_related("plan", "scheduled_plan")
        .order_by("-plan__monthly_price_cents", "-plan__sort_order", "-current_period_start")
        .first()
    )


def effective_plan(user, now: datetime | None = None) -> Plan:
    """Exactly one plan for every user at every moment: Free when nothing else applies."""
    subscription = granting_subscription(user, now)
    return subscription.plan if subscription else default_plan()


def current_period(user, now: datetime | None = None) -> BillingPeriod:
    now = now or timezone.now()
    subscription = granting_subscription(user, now)
    if subscription is None:
        return BillingPeriod(default_plan(), free_period(user, now), None)
    return BillingPeriod(subscription.plan, subscription_period(subscription, now), subscription)


def subscription_period(subscription: Subscription, now: datetime) -> Period:
    """The subscription's billing cycle holding `now`, counting usage from where it was already counted.

    A subscription that began while the user was in another period (Free's month, or a paid plan's
    cycle) counts that period's usage in its first cycle, so a plan change never resets what was used:
    the new allowance applies to it (see usage_carried_from).
    """
    if subscription.provider == Subscription.Provider.GIFT:
        # Given for some months: a month's allowance each month from the day it was given, to its end.
        start = subscription.current_period_start
        month = cycle_containing(start, add_months(start, 1), now)
        cycle = Period(month.start, min(month.end, subscription.current_period_end))
    else:
        cycle = cycle_containing(subscription.current_period_start, subscription.current_period_end, now)
    carried = subscription.usage_period_start
    if carried is not None and carried < cycle.start and cycle.start == subscription.current_period_start:
        return Period(carried, cycle.end)
    return cycle


def usage_carried_from(user, starts_at: datetime) -> datetime | None:
    """Where a subscription beginning at `starts_at` counts its first period's usage from: the start of
    the period the user is in then, if earlier. Ask before the new subscription grants anything."""
    start = current_period(user, starts_at).period.start
    return start if start < starts_at else None


def is_upgrade(plan: Plan, current: Plan) -> bool:
    """The one rule for the direction of a plan change: an upgrade applies at once, anything else at
    the end of the paid period."""
    return (plan.monthly_price_cents, plan.sort_order) > (current.monthly_price_cents, current.sort_order)


@dataclass(frozen=True)
class ScheduledChange:
    """A downgrade or cancellation waiting for the end of the paid period."""

    plan: Plan
    next_plan: Plan
    on: datetime
    subscription: Subscription
    #: Why it cannot be undone ("Keep my plan"), when it cannot: see unpaid_leftover_reason.
    final_because: str = ""


def unpaid_leftover_reason(subscription: Subscription) -> str:
    """The sentence that tells someone why their development subscription ends and cannot be changed."""
    provider = Subscription.Provider(settings.PAYMENT_PROVIDER).label
    ends = date_format(timezone.localtime(subscription.current_period_end), "j F")
    return _(
        "Your %(plan)s plan came from development payments, when nothing was charged; now that payments go "
        "through %(provider)s, it ends on %(date)s and cannot be renewed or changed."
    ) % {"plan": subscription.plan.name, "provider": provider, "date": ends}


def gift_reason(subscription: Subscription) -> str:
    """The sentence that tells someone their plan was given by staff, and until when."""
    ends = date_format(timezone.localtime(subscription.current_period_end), "j F Y")
    return _("Your %(plan)s plan was given to you by staff until %(date)s; it cannot be changed before then.") % {
        "plan": subscription.plan.name,
        "date": ends,
    }


def scheduled_change(billing: BillingPeriod) -> ScheduledChange | None:
    subscription = billing.subscription
    if subscription is None:
        return None
    if subscription.provider == Subscription.Provider.GIFT:
        # What grants a plan once the gift has ended: a subscription of their own, or the default plan.
        after = granting_subscription(subscription.user, subscription.current_period_end)
        return ScheduledChange(
            plan=subscription.plan,
            next_plan=after.plan if after is not None else default_plan(),
            on=subscription.current_period_end,
            subscription=subscription,
            final_because=gift_reason(subscription),
        )
    if subscription.is_unpaid_leftover:
        return ScheduledChange(
            plan=subscription.plan,
            next_plan=default_plan(),
            on=subscription.current_period_end,
            subscription=subscription,
            final_because=unpaid_leftover_reason(subscription),
        )
    if subscription.cancel_at_period_end:
        next_plan = default_plan()
    elif subscription.scheduled_plan_id is not None:
        next_plan = subscription.scheduled_plan
    else:
        return None
    return ScheduledChange(
        plan=subscription.plan, next_plan=next_plan, on=subscription.current_period_end, subscription=subscription
    )


def free_period(user, now: datetime) -> Period:
    """The calendar month; after a paid subscription has ended, months counted on from its end instead.

    So someone who leaves Pro mid-month starts a fresh Free allowance then, rather than finding the
    month's Pro usage counted against Free's much smaller one.
    """
    ended_at = None
    if user is not None and user.is_authenticated:
        ended_at = (
            Subscription.objects.filter(user=user, ended_at__lte=now)
            .order_by("-ended_at")
            .values_list("ended_at", flat=True)
            .first()
        )
    return _free_period_since(ended_at, now)


def _free_period_since(ended_at: datetime | None, now: datetime) -> Period:
    """`free_period`, given when the user's last paid subscription ended (None: never)."""
    if ended_at is None:
        return calendar_month(now)
    return cycle_containing(ended_at, add_months(ended_at, 1), now)


def _allows(plan: Plan, model: ModelInfo) -> bool:
    """The one rule, for chat and embedding models alike: every model, or the ones the plan lists; Auto
    where the plan allows at least one of the two models it chooses between (it picks among those)."""
    if model.kind == AUTO:
        return any(_allows(plan, m) for m in auto_models() or ())
    return plan.all_models or model.id in plan.model_ids


def plan_models(plan: Plan) -> list[ModelInfo]:
    """The offered chat models the plan may use, in the catalogue's order."""
    return [model for model in available_models() if _allows(plan, model)]


def plan_embedding_models(plan: Plan) -> list[ModelInfo]:
    """The embedding models the plan may use (at /v1/embeddings), in the catalogue's order."""
    return [model for model in embedding_models() if _allows(plan, model)]


def plan_model_ids(plan: Plan) -> list[str]:
    """Ids of every model the plan may use: its chat models, then its embedding models."""
    return [model.id for model in plan_models(plan) + plan_embedding_models(plan)]


def allowed_models(user) -> list[str]:
    """Ids of the models the user's plan may use, in the catalogue's order."""
    return plan_model_ids(effective_plan(user))


# --- Context windows -----------------------------------------------------------------------------------
# A plan's `max_context_tokens` is a ceiling; what one request can hold on a model is the smaller of
# that and the model's own window. Everything that applies or states a plan's window (the context
# budget, the Plans and landing pages, refusals' upgrade offers, /v1/models, the plan admin) asks
# `context_window`, so no page promises more than the model gives.


def context_window(plan: Plan, model: ModelInfo) -> int:
    """The tokens one request (prompt and answer) may hold under `plan` on `model`."""
    return min(plan.max_context_tokens, model.context_tokens)


@dataclass(frozen=True)
class ModelWindow:
    model: ModelInfo
    tokens: int


def context_windows(plan: Plan) -> list[ModelWindow]:
    """The plan's window on each of its models, in the catalogue's order (Auto is not a model of its own)."""
    return [ModelWindow(model, context_window(plan, model)) for model in plan_models(plan) if model.kind != AUTO]


def context_words(plan: Plan) -> str:
    """The plan's context in words, as every page states it: "8,192 tokens" when it is the same on
    all its models, else each size with its models ("8,192 tokens on Simulated Small; 32,768 on
    Simulated Large"). Empty for a plan without models."""
    by_size: dict[int, list[str]] = {}
    for window in context_windows(plan):
        by_size.setdefault(window.tokens, []).append(window.model.name)
    if len(by_size) <= 1:
        return "".join(_("%(tokens)s tokens") % {"tokens": grouped(tokens)} for tokens in by_size)
    parts = []
    for n, (tokens, names) in enumerate(by_size.items()):
        models = reduce(lambda first, second: _("%(first)s and %(second)s") % {"first": first, "second": second}, names)
        if n == 0:
            parts.append(_("%(tokens)s tokens on %(models)s") % {"tokens": grouped(tokens), "models": models})
        else:
            parts.append(_("%(tokens)s on %(models)s") % {"tokens": grouped(tokens), "models": models})
    return "; ".join(parts)


def context_promise_warning(plan: Plan) -> str | None:
    """What staff are told when the plan allows more context than every one of its models holds
    (the figure is saved, since a bigger model may come, but no page will state it)."""
    windows = context_windows(plan)
    if not windows:
        return None
    largest = max(window.model.context_tokens for window in windows)
    if plan.max_context_tokens <= largest:
        return None
    each = "; ".join(f"{window.model.name}: {window.model.context_tokens:,}" for window in windows)
    return (
        f"The {plan.name} plan allows {plan.max_context_tokens:,} tokens of context, but its models hold at "
        f"most {largest:,} ({each}). Pages, refusals and the API state {context_words(plan)}: lower the "
        "plan's figure, or offer a model with a bigger window."
    )


def cheapest_plan_with_bigger_window(plan: Plan, model: ModelInfo) -> Plan | None:
    """The plan to suggest when `plan`'s window on `model` is what stops someone: the cheapest public plan
    that includes the model and gives a bigger window on it (none when the model itself is the limit)."""
    current = context_window(plan, model)
    better = [
        p
        for p in public_plans()
        if is_upgrade(p, plan) and context_window(p, model) > current and model.id in plan_model_ids(p)
    ]
    return min(better, key=lambda p: (p.monthly_price_cents, p.sort_order), default=None)


def public_plans() -> list[Plan]:
    return list(Plan.objects.filter(is_public=True))


def cheapest_plan_with_more(plan: Plan, field: str) -> Plan | None:
    """The plan to suggest when `plan`'s `field` (a limit) is what stops someone: an upgrade, never a
    cheaper plan that happens to have more of it."""
    current = getattr(plan, field)
    better = [p for p in public_plans() if getattr(p, field) > current and is_upgrade(p, plan)]
    return min(better, key=lambda p: (p.monthly_price_cents, p.sort_order), default=None)


def cheapest_plan_allowing(model_id: str) -> Plan | None:
    allowing = [p for p in public_plans() if model_id in plan_model_ids(p)]
    return min(allowing, key=lambda p: (p.monthly_price_cents, p.sort_order), default=None)


def ledger_total(user_id: int, period: Period) -> int:
    """Billable tokens in the period, from the ledger alone (the truth the Redis counters cache)."""
    total = UsageRecord.objects.filter(user_id=user_id, created__gte=period.start, created__lt=period.end).aggregate(
        total=Sum("billable_tokens")
    )["total"]
    return total or 0


@dataclass(frozen=True)
class UsageSummary:
    billing: BillingPeriod
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    billable_tokens: int
    generations: int

    @property
    def allowance(self) -> int:
        return self.billing.plan.tokens_per_month

    @property
    def remaining(self) -> int:
        return max(self.allowance - self.billable_tokens, 0)

    @property
    def percent_used(self) -> int:
        return min(100, round(100 * self.billable_tokens / self.allowance)) if self.allowance else 100


def usage_summary(user, now: datetime | None = None) -> UsageSummary:
    billing = current_period(user, now)
    totals = UsageRecord.objects.filter(
        user=user, created__gte=billing.period.start, created__lt=billing.period.end
    ).aggregate(
        prompt=Sum("prompt_tokens"),
        cached=Sum("cached_tokens"),
        completion=Sum("completion_tokens"),
        billable=Sum("billable_tokens"),
        generations=Count("pk"),
    )
    return UsageSummary(
        billing=billing,
        prompt_tokens=totals["prompt"] or 0,
        cached_tokens=totals["cached"] or 0,
        completion_tokens=totals["completion"] or 0,
        billable_tokens=totals["billable"] or 0,
        generations=totals["generations"],
    )


def usage_by_model(user, period: Period) -> list[dict]:
    return list(
        UsageRecord.objects.filter(user=user, created__gte=period.start, created__lt=period.end)
        .values("model")
        .annotate(
            billable=Sum("billable_tokens"),
            prompt=Sum("prompt_tokens"),
            cached=Sum("cached_tokens"),
            completion=Sum("completion_tokens"),
        )
        .order_by("-billable", "model")
    )


def daily_usage(user, *, days: int = 30, now: datetime | None = None) -> list[tuple[date, int]]:
    """Billable tokens per day (in the server's time zone) for the last `days` days, oldest first, zeros included."""
    today = timezone.localdate(now or timezone.now())
    first = today - timedelta(days=days - 1)
    rows = (
        UsageRecord.objects.filter(user=user, created__date__gte=first)
        .annotate(day=TruncDate("created"))
        .values("day")
        .annotate(billable=Sum("billable_tokens"))
    )
    per_day = {row["day"]: row["billable"] for row in rows}
    return [(first + timedelta(days=n), per_day.get(first + timedelta(days=n), 0)) for n in range(days)]


@dataclass(frozen=True)
class NextCharge:
    """The subscription's next payment, from what is stored: its plan's price (the Plans page's, which
    Stripe's price is kept in step with) on the day its period ends. Stripe's upcoming invoice is not
    stored, so nothing here knows of tax or proration."""

    on: datetime
    plan: Plan

    @property
    def amount(self) -> str:
        return f"{self.plan.monthly_price} {self.plan.currency.upper()}"


def next_charge(billing: BillingPeriod, scheduled: ScheduledChange | None) -> NextCharge | None:
    """When the subscription is next charged, and at which plan's price; None when no charge is due: no
    subscription, or one nothing charges (development payments, a plan given by staff), one that ends
    with its period, or one past due (Stripe retries the unpaid invoice; the page says what to do)."""
    subscription = billing.subscription
    if subscription is None or subscription.provider != Subscription.Provider.STRIPE:
        return None
    if subscription.status not in (Subscription.Status.ACTIVE, Subscription.Status.TRIALING):
        return None
    if scheduled is not None:
        if scheduled.final_because or scheduled.next_plan.is_free:
            return None
        return NextCharge(on=scheduled.on, plan=scheduled.next_plan)
    if subscription.plan.is_free:
        return None
    return NextCharge(on=billing.period.end, plan=subscription.plan)


@dataclass(frozen=True)
class BeganBeforePlan:
    """A plan's first period that began before the plan did: it began inside another period (Free's
    month), whose usage it counts (`subscription_period`), so the period runs from that one's start
    to the end of the plan's first month."""

    plan: Plan
    plan_started: datetime
    counted_from: datetime
    ends: datetime


def began_before_plan(billing: BillingPeriod) -> BeganBeforePlan | None:
    """Why the current period starts before the plan that has it, when it does (None otherwise)."""
    subscription = billing.subscription
    if subscription is None or billing.period.start >= subscription.current_period_start:
        return None
    return BeganBeforePlan(
        plan=subscription.plan,
        plan_started=subscription.current_period_start,
        counted_from=billing.period.start,
        ends=billing.period.end,
    )


@dataclass(frozen=True)
class BillingOverview:
    billing: BillingPeriod
    #: The most recent subscription of any status, to explain a canceled or not-yet-paid one.
    latest: Subscription | None
    grace_ends: datetime | None
    scheduled: ScheduledChange | None = None
    next_charge: NextCharge | None = None
    began_before_plan: BeganBeforePlan | None = None

    @property
    def plan(self) -> Plan:
        return self.billing.plan

    @property
    def subscription(self) -> Subscription | None:
        return self.billing.subscription


def billing_overview(user, now: datetime | None = None) -> BillingOverview:
    billing = current_period(user, now)
    latest = Subscription.objects.filter(user=user).select_related("plan").order_by("-updated").first()
    subscription = billing.subscription
    grace_ends = None
    if subscription is not None and subscription.status == Subscription.Status.PAST_DUE and subscription.past_due_since:
        grace_ends = subscription.past_due_since + timedelta(days=settings.BILLING_PAST_DUE_GRACE_DAYS)
    scheduled = scheduled_change(billing)
    return BillingOverview(
        billing=billing,
        latest=latest,
        grace_ends=grace_ends,
        scheduled=scheduled,
        next_charge=next_charge(billing, scheduled),
        began_before_plan=began_before_plan(billing),
    )


def usage_records(user):
    """Every ledger row of the user, oldest first (read-only; their data export lists them)."""
    return UsageRecord.objects.filter(user=user).order_by("created", "pk")


@dataclass(frozen=True)
class UserUsageLine:
    plan: Plan
    period: Period
    billable_tokens: int

    @property
    def percent_used(self) -> int:
        allowance = self.plan.tokens_per_month
        return min(100, round(100 * self.billable_tokens / allowance)) if allowance else 100


def _richness(subscription: Subscription) -> tuple:
    """The order `granting_subscription` picks by (highest first)."""
    plan = subscription.plan
    return plan.monthly_price_cents, plan.sort_order, subscription.current_period_start


def plans_and_usage(users, now: datetime | None = None) -> dict[int, UserUsageLine]:
    """Each user's plan and billable tokens this period, for a page of users in a fixed number of
    queries (the staff console's list): `current_period`'s rules (`subscription_period`,
    `free_period`), so staff see what the user sees."""
    now = now or timezone.now()
    users = list(users)
    if not users:
        return {}
    ids = [user.pk for user in users]
    granting_ids = set(Subscription.objects.granting(now).filter(user_id__in=ids).values_list("pk", flat=True))
    granting: dict[int, Subscription] = {}
    ended: dict[int, datetime] = {}
    for sub in Subscription.objects.filter(user_id__in=ids).select_related("plan"):
        if sub.pk in granting_ids:
            best = granting.get(sub.user_id)
            if best is None or _richness(sub) > _richness(best):
                granting[sub.user_id] = sub
        if sub.ended_at is not None and sub.ended_at <= now:
            ended[sub.user_id] = max(sub.ended_at, ended.get(sub.user_id, sub.ended_at))
    free = default_plan()
    periods: dict[int, tuple[Plan, Period]] = {}
    for user_id in ids:
        sub = granting.get(user_id)
        if sub is not None:
            periods[user_id] = (sub.plan, subscription_period(sub, now))
        else:
            periods[user_id] = (free, _free_period_since(ended.get(user_id), now))
    in_period = reduce(
        or_,
        (
            Q(user_id=user_id, created__gte=period.start, created__lt=period.end)
            for user_id, (_plan, period) in periods.items()
        ),
    )
    totals = dict(
        UsageRecord.objects.filter(in_period)
        .values("user_id")
        .annotate(total=Sum("billable_tokens"))
        .values_list("user_id", "total")
    )
    return {
        user_id: UserUsageLine(plan, period, totals.get(user_id) or 0) for user_id, (plan, period) in periods.items()
    }

"""Changing plans, and the periodic upkeep of subscriptions (rollover, end of grace)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from audit import services as audit
from billing import selectors
from billing.models import Plan, Subscription
from billing.periods import add_months
from billing.providers import NextStep, ReturnUrls, get_provider
from billing.providers.base import Observed
from billing.services import stripe_events
from billing.services.quota import ensure_counter
from config.refusals import BadInput, NotFound

logger = logging.getLogger(__name__)


def _day(moment: datetime) -> str:
    return date_format(timezone.localtime(moment), "j F")


def _observed(observed: Observed | None, now: datetime | None = None) -> None:
    """What the payment service said a subscription is now, after a change or a read, joins its history
    (and its state follows from that history: services/stripe_events.py)."""
    if observed is not None:
        stripe_events.record_api_read(observed, now or timezone.now())


def change_plan(user, plan_slug: str, *, urls: ReturnUrls) -> NextStep:
    """Move the user to another public plan: an upgrade at once, a downgrade when the paid period ends.

    Usage already counted in the period stays counted whichever way the plan changes. Returns where
    to send the user and, for a change made here, the one sentence that is true about it. A development
    subscription left over under a paying provider is never changed (_subscribe_after_development_payments).
    """
    plan = Plan.objects.filter(slug=plan_slug, is_public=True).first()
    if plan is None:
        raise NotFound(_("There is no plan called %(slug)s.") % {"slug": repr(plan_slug)})
    billing = selectors.current_period(user)
    current, subscription = billing.plan, billing.subscription
    if subscription is not None and subscription.is_unpaid_leftover:
        return _subscribe_after_development_payments(user, plan, subscription, urls=urls)
    if subscription is not None and subscription.provider == Subscription.Provider.GIFT:
        # A given plan is not changed; a plan of their own is bought beside it, the richer deciding meanwhile.
        after = _("A plan of your own can be chosen after that.")
        raise BadInput(f"{selectors.gift_reason(subscription)} {after}")
    scheduled = selectors.scheduled_change(billing)
    if plan.pk == current.pk:
        if scheduled is not None:
            return keep_plan(user, urls=urls)
        raise BadInput(_("You are already on the %(plan)s plan.") % {"plan": plan.name})
    if scheduled is not None and scheduled.next_plan.pk == plan.pk:
        raise BadInput(
            _("Your %(current)s plan already moves to %(plan)s on %(date)s.")
            % {"current": current.name, "plan": plan.name, "date": _day(scheduled.on)}
        )
    if subscription is None:
        provider = get_provider()
        step = provider.subscribe(user, plan, urls=urls)
        upgrading = True
    else:
        provider = get_provider(subscription.provider)
        upgrading = selectors.is_upgrade(plan, current)
        if upgrading:
            step = provider.upgrade(subscription, plan, urls=urls)
        elif plan.is_default:
            _observed(provider.schedule_cancel(subscription))
            step = None
        else:
            step = provider.schedule_downgrade(subscription, plan, urls=urls)
    if step is not None:
        return step  # the provider's own page (checkout or portal) takes it from here
    if upgrading:
        if provider.takes_payment:
            message = _("You are now on the %(plan)s plan.")
        else:
            message = _("You are now on the %(plan)s plan (development payments: nothing was charged).")
        return NextStep(urls.billing, message % {"plan": plan.name})
    ends = _day(subscription.current_period_end)
    message = _("Your %(current)s plan continues until %(date)s; then you move to %(plan)s.") % {
        "current": current.name,
        "date": ends,
        "plan": plan.name,
    }
    if provider.takes_payment and plan.is_default:
        message += " " + _("You will not be charged again.")
    return NextStep(urls.billing, message)


def _subscribe_after_development_payments(user, plan: Plan, leftover: Subscription, *, urls: ReturnUrls) -> NextStep:
    """A plan chosen while a development subscription (nothing paid) runs out its period under a paying
    provider: that subscription is never changed; a paid plan is bought through the provider instead,
    once (a user who already pays there changes that subscription in the provider's portal)."""
    why = selectors.unpaid_leftover_reason(leftover)
    if plan.is_default:
        then = _("You move to the %(plan)s plan then.") % {"plan": plan.name}
        raise BadInput(f"{why} {then}")
    provider = get_provider()
    paying = (
        Subscription.objects.granting()
        .filter(user=user, provider=provider.name)
        .select_related("plan")
        .order_by("-plan__monthly_price_cents", "-plan__sort_order")
        .first()
    )
    if paying is not None:
        carries_on = _(
            "Your %(plan)s plan through %(provider)s carries on after it; change that one under Billing, in Payment "
            "method, invoices and cancellation."
        ) % {"plan": paying.plan.name, "provider": provider.label}
        raise BadInput(f"{why} {carries_on}")
    step = provider.subscribe(user, plan, urls=urls)
    return step or NextStep(urls.billing, _("You are now on the %(plan)s plan.") % {"plan": plan.name})


def keep_plan(user, *, urls: ReturnUrls) -> NextStep:
    """Undo a downgrade or cancellation that is waiting for the end of the period."""
    billing = selectors.current_period(user)
    scheduled = selectors.scheduled_change(billing)
    if scheduled is None:
        raise BadInput(
            _("Nothing is scheduled to change: you stay on the %(plan)s plan.") % {"plan": billing.plan.name}
        )
    if scheduled.final_because:
        raise BadInput(scheduled.final_because)
    _observed(get_provider(scheduled.subscription.provider).keep(scheduled.subscription))
    return NextStep(
        urls.billing,
        _("You stay on the %(plan)s plan; it renews on %(date)s.")
        % {"plan": scheduled.plan.name, "date": _day(scheduled.on)},
    )


def cancel_now(user, now: datetime | None = None, *, why: str = "account deletion") -> list[Subscription]:
    """End every live subscription of the user at once, at its provider too (the account is being
    deleted, or banned). A provider that does not answer raises Busy, and nothing else has changed."""
    now = now or timezone.now()
    live = [
        Subscription.Status.ACTIVE,
        Subscription.Status.TRIALING,
        Subscription.Status.PAST_DUE,
        Subscription.Status.INCOMPLETE,
    ]
    ended = list(Subscription.objects.filter(user=user, status__in=live))
    # Those a payment service must end first: if it does not answer, nothing here has changed yet.
    ended.sort(key=lambda subscription: not get_provider(subscription.provider).takes_payment)
    for subscription in ended:
        _observed(get_provider(subscription.provider).cancel_now(subscription, now), now)
        logger.info("subscription %s of user %s canceled at once (%s)", subscription.pk, user.pk, why)
    return ended


def give_plan(user, plan: Plan, *, months: int, actor, reason: str, now: datetime | None = None) -> Subscription:
    """Staff give `user` the `plan` at no charge from now for `months` (a gift: no provider is asked,
    nothing is charged, a month's allowance each month, and it ends on its own). Only for someone without
    a subscription of their own: beside one, the person would be charged for a plan the gift hides. Usage
    counted in the period they are in keeps counting, as with any plan change; a gift already running is
    replaced. Audited with `reason`."""
    now = now or timezone.now()
    reason = reason.strip()
    if not reason:
        raise BadInput("Give a reason: it is kept in the audit log.")
    if not 1 <= months <= 24:
        raise BadInput("A plan is given for 1 to 24 months.")
    if plan.is_default:
        raise BadInput(f"Everyone has the {plan.name} plan without a subscription: there is nothing to give.")
    own = Subscription.objects.granting(now).filter(user=user).exclude(provider=Subscription.Provider.GIFT)
    own = own.select_related("plan").first()
    if own is not None:
        raise BadInput(
            f"{user.email} has the {own.plan.name} plan through {own.get_provider_display()}: a plan is given only "
            "to someone without a subscription of their own (beside one, they would go on paying for a plan "
            "the gift hides). Schedule a change of that subscription instead."
        )
    with transaction.atomic():
        running = list(
            Subscription.objects.granting(now)
            .filter(user=user, provider=Subscription.Provider.GIFT)
            .select_for_update()
        )
        # Asked before the running gift ends: the period the person is in keeps counting.
        carried = selectors.usage_carried_from(user, now)
        for gift in running:
            get_provider(gift.provider).cancel_now(gift, now)
        gift = Subscription.objects.create(
            user=user,
            plan=plan,
            status=Subscription.Status.ACTIVE,
            provider=Subscription.Provider.GIFT,
            provider_subscription_id=f"gift-{user.pk}-{uuid.uuid4().hex[:12]}",
            current_period_start=now,
            current_period_end=add_months(now, months),
            usage_period_start=carried,
            cancel_at_period_end=True,
        )
        audit.record(
            actor,
            "billing.plan_given",
            user,
            reason,
            details={
                "plan": plan.slug,
                "until": gift.current_period_end.isoformat(),
                "replaced": [old.pk for old in running],
            },
        )
    ensure_counter(user.pk, selectors.current_period(user, now).period, now)
    return gift


def schedule_plan_change(user, plan: Plan, *, actor, reason: str) -> str:
    """Staff move `user` to a smaller `plan` when their paid period ends, through their provider, as the
    person's own downgrade would (so a Stripe subscription stays what Stripe says). Returns the sentence
    that says what will happen. Audited with `reason`."""
    reason = reason.strip()
    if not reason:
        raise BadInput("Give a reason: it is kept in the audit log.")
    billing = selectors.current_period(user)
    subscription = billing.subscription
    if subscription is None:
        raise BadInput(f"{user.email} has no subscription: the {billing.plan.name} plan has no period to end.")
    if subscription.provider == Subscription.Provider.GIFT:
        raise BadInput(f"The {billing.plan.name} plan was given by staff and ends on its own; give another instead.")
    if plan.pk == billing.plan.pk or selectors.is_upgrade(plan, billing.plan):
        raise BadInput(
            f"Only a smaller plan waits for the end of the period; {plan.name} is not smaller than "
            f"{billing.plan.name}. Give it at no charge instead, or let {user.email} upgrade under Billing."
        )
    provider = get_provider(subscription.provider)
    if plan.is_default:
        _observed(provider.schedule_cancel(subscription))
    elif provider.takes_payment:
        raise BadInput(
            f"A move to a smaller paid plan is made by the customer in {provider.label}'s portal (it changes what "
            f"they are charged); from here you can schedule the move to {selectors.default_plan().name}."
        )
    else:
        provider.schedule_downgrade(subscription, plan, urls=ReturnUrls(success="", cancel="", billing=""))
    audit.record(
        actor,
        "billing.plan_change_scheduled",
        user,
        reason,
        details={"from": billing.plan.slug, "to": plan.slug, "on": subscription.current_period_end.isoformat()},
    )
    return f"{user.email} moves from {billing.plan.name} to {plan.name} on {_day(subscription.current_period_end)}."


@dataclass(frozen=True)
class UpkeepReport:
    examined: int
    changed: list[int]


def roll_over_periods(now: datetime | None = None) -> UpkeepReport:
    """Bring subscriptions whose period has ended into their next period (or to their end).

    Dev subscriptions advance a month (or end, when set to cancel); Stripe ones are read back from
    Stripe, whose renewal events may be late. The new period's quota counter starts from the ledger.
    """
    now = now or timezone.now()
    # Not just the granting ones: a subscription set to cancel stops granting when its period ends,
    # and this is where it is marked as ended.
    live = [Subscription.Status.ACTIVE, Subscription.Status.TRIALING, Subscription.Status.PAST_DUE]
    due = list(Subscription.objects.filter(status__in=live, current_period_end__lte=now).select_related("user"))
    changed = []
    for subscription in due:
        before = (subscription.status, subscription.current_period_end)
        _observed(get_provider(subscription.provider).refresh(subscription, now), now)
        subscription.refresh_from_db()
        if (subscription.status, subscription.current_period_end) != before:
            changed.append(subscription.pk)
        ensure_counter(subscription.user_id, selectors.current_period(subscription.user, now).period, now)
    return UpkeepReport(examined=len(due), changed=changed)


def end_past_due_after_grace(now: datetime | None = None) -> UpkeepReport:
    """Cancel subscriptions that stayed past due for longer than BILLING_PAST_DUE_GRACE_DAYS: back to Free."""
    now = now or timezone.now()
    limit = now - timedelta(days=settings.BILLING_PAST_DUE_GRACE_DAYS)
    expired = list(Subscription.objects.filter(status=Subscription.Status.PAST_DUE, past_due_since__lte=limit))
    for subscription in expired:
        provider = get_provider(subscription.provider)
        if provider.keeps_history:
            # The decision joins the subscription's history (a later payment can still revive it).
            stripe_events.record_grace_expired(subscription, now)
        provider.end_after_grace(subscription, now)
        logger.info("subscription %s of user %s ended after its grace period", subscription.pk, subscription.user_id)
    ended = Subscription.objects.filter(pk__in=[s.pk for s in expired], status=Subscription.Status.CANCELED)
    return UpkeepReport(examined=len(expired), changed=list(ended.values_list("pk", flat=True)))

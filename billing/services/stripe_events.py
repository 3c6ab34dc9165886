"""Stripe webhooks: verify the signature, store the event, then fold it into the subscription.

Idempotent and order-safe by construction. Each event is stored once, keyed by its id (a redelivery
finds it already there). Processing does not apply "this event" to the current row: it recomputes
the subscription from every event stored about it, sorted by when Stripe says each happened (its
`created`), so the same set of events gives the same state whatever order, and however many times,
they arrived. Two other kinds of observation join the same history: a read of the subscription from
Stripe's API (period rollover, when a renewal event is late) and the local decision to end a
past-due subscription after its grace period.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import stripe
from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from billing import selectors
from billing.models import BillingCustomer, Plan, ProviderEvent, Subscription
from billing.stripe_prices import plan_slug_for_price
from config.refusals import BadInput
from config.text import read_json

logger = logging.getLogger(__name__)

CHECKOUT_COMPLETED = "checkout.session.completed"
SUBSCRIPTION_CREATED = "customer.subscription.created"
SUBSCRIPTION_UPDATED = "customer.subscription.updated"
SUBSCRIPTION_DELETED = "customer.subscription.deleted"
INVOICE_PAID = "invoice.paid"
INVOICE_FAILED = "invoice.payment_failed"
API_READ = "api.subscription.read"
GRACE_EXPIRED = "local.subscription.grace_expired"

WEBHOOK_TYPES = {
    CHECKOUT_COMPLETED,
    SUBSCRIPTION_CREATED,
    SUBSCRIPTION_UPDATED,
    SUBSCRIPTION_DELETED,
    INVOICE_PAID,
    INVOICE_FAILED,
}
SNAPSHOT_TYPES = {SUBSCRIPTION_CREATED, SUBSCRIPTION_UPDATED, SUBSCRIPTION_DELETED, API_READ}

# Stripe's `created` has one-second resolution; events of the same second are put in the order in
# which Stripe emits them, so ties are broken the same way on every replay.
SAME_SECOND_ORDER = {
    CHECKOUT_COMPLETED: 0,
    SUBSCRIPTION_CREATED: 1,
    INVOICE_FAILED: 2,
    INVOICE_PAID: 3,
    SUBSCRIPTION_UPDATED: 4,
    API_READ: 4,
    SUBSCRIPTION_DELETED: 5,
    GRACE_EXPIRED: 6,
}

STATUSES = {
    "active": Subscription.Status.ACTIVE,
    "trialing": Subscription.Status.TRIALING,
    "past_due": Subscription.Status.PAST_DUE,
    # All retries failed but Stripe keeps the subscription: treated as past due (grace, then Free).
    "unpaid": Subscription.Status.PAST_DUE,
    "canceled": Subscription.Status.CANCELED,
    "incomplete": Subscription.Status.INCOMPLETE,
    "incomplete_expired": Subscription.Status.CANCELED,
    "paused": Subscription.Status.INCOMPLETE,
}

# An event that keeps failing is left for staff (admin: Provider events) after this many tries.
MAX_ATTEMPTS = 20
#: The longest event id and subscription reference a ProviderEvent holds.
REFERENCE_MAX = 255


class Unresolved(Exception):
    """The events so far do not say whose subscription this is, or which plan it is for."""


class AccountGone(Exception):
    """The subscription's account was deleted (it was cancelled first): nothing is left to update."""


def _moment(timestamp: int | float | None) -> datetime | None:
    return None if timestamp is None else datetime.fromtimestamp(int(timestamp), tz=UTC)


def _id(value) -> str:
    """A Stripe reference that may arrive as an id or as the expanded object ("" for anything else)."""
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) else ""


def subscription_ref(event_type: str, obj: dict) -> str:
    if event_type in SNAPSHOT_TYPES or event_type == GRACE_EXPIRED:
        return _id(obj.get("id"))
    if event_type == CHECKOUT_COMPLETED:
        return _id(obj.get("subscription"))
    # Invoices: `parent.subscription_details.subscription` since API version 2025-03-31, before that
    # a top-level `subscription`.
    parent = obj.get("parent")
    details = parent.get("subscription_details") if isinstance(parent, dict) else None
    return (_id(details.get("subscription")) if isinstance(details, dict) else "") or _id(obj.get("subscription"))


# --- Receiving -------------------------------------------------------------------------------------------


def verify(payload: bytes, signature: str | None) -> object:
    """The event, if `Stripe-Signature` proves Stripe sent exactly these bytes recently; else BadInput (400).

    The signature is checked before anything is parsed, and the payload is read as any request's JSON
    (config.text.read_json: nesting, NUL)."""
    secret = settings.STRIPE_WEBHOOK_SECRET
    if not secret:
        raise BadInput("Stripe webhooks are not configured on this server (STRIPE_WEBHOOK_SECRET is unset).")
    try:
        stripe.WebhookSignature.verify_header(payload, signature, secret, stripe.Webhook.DEFAULT_TOLERANCE)
    except stripe.SignatureVerificationError as exc:
        raise BadInput("The Stripe-Signature header does not match this payload.") from exc
    except UnicodeDecodeError as exc:
        raise BadInput("The webhook payload is not valid JSON: it is not UTF-8.") from exc
    return read_json(payload, "webhook payload")


def _event_fields(data: dict, event_type: str) -> tuple[str, datetime, dict]:
    """The id, time and object of a webhook event of a type billing handles, or BadInput saying what is
    wrong. Stripe signs only well-formed events, but a 500 here would have Stripe retry one for days."""
    event_id, created, wrapper = data.get("id"), data.get("created"), data.get("data")
    if not isinstance(event_id, str) or not 0 < len(event_id) <= REFERENCE_MAX:
        raise BadInput(f"The Stripe event has no id (a string of at most {REFERENCE_MAX} characters).")
    occurred_at = None
    if isinstance(created, int) and not isinstance(created, bool):
        with contextlib.suppress(OverflowError, OSError, ValueError):
            occurred_at = datetime.fromtimestamp(created, tz=UTC)
    if occurred_at is None:
        raise BadInput(f"The Stripe event {event_id} has no created time (Unix seconds).")
    obj = wrapper.get("object") if isinstance(wrapper, dict) else None
    if not isinstance(obj, dict):
        raise BadInput(f"The Stripe event {event_id} has no data.object.")
    ref = subscription_ref(event_type, obj)
    if (event_type in SNAPSHOT_TYPES and not ref) or len(ref) > REFERENCE_MAX:
        raise BadInput(f"The Stripe event {event_id} names no subscription Stripe could have sent.")
    return event_id, occurred_at, obj


def _store(*, event_id: str, event_type: str, occurred_at: datetime, obj: dict, source: str) -> ProviderEvent:
    event, _ = ProviderEvent.objects.get_or_create(
        event_id=event_id,
        defaults={
            "type": event_type,
            "occurred_at": occurred_at,
            "payload": obj,
            "source": source,
            "subscription_ref": subscription_ref(event_type, obj),
        },
    )
    return event


def receive_webhook(payload: bytes, signature: str | None) -> ProviderEvent | None:
    """Verify and store a webhook event, then queue its processing. None for event types not handled."""
    data = verify(payload, signature)
    event_type = data.get("type") if isinstance(data, dict) else None
    if not isinstance(event_type, str):
        raise BadInput("The webhook payload is not a Stripe event: it has no type.")
    if event_type not in WEBHOOK_TYPES:
        return None
    event_id, occurred_at, obj = _event_fields(data, event_type)
    event = _store(
        event_id=event_id,
        event_type=event_type,
        occurred_at=occurred_at,
        obj=obj,
        source=ProviderEvent.Source.WEBHOOK,
    )
    if event.processed_at is None:
        transaction.on_commit(lambda: process_provider_event.delay(event.event_id))
    return event


def record_api_read(subscription: dict, now: datetime) -> None:
    """A subscription read from Stripe's API joins its history as an observation made `now`."""
    # Microseconds in the id: a change and its undo within one second are two observations, not one.
    _store(
        event_id=f"api:{subscription['id']}:{now.timestamp():.6f}",
        event_type=API_READ,
        occurred_at=now,
        obj=subscription,
        source=ProviderEvent.Source.API,
    )
    with transaction.atomic():
        fold_subscription(subscription["id"])


def record_grace_expired(subscription: Subscription, now: datetime) -> None:
    """The decision to end a past-due subscription joins its history (a later payment can still revive it)."""
    ref = subscription.provider_subscription_id
    since = int(subscription.past_due_since.timestamp()) if subscription.past_due_since else 0
    _store(
        event_id=f"local:grace:{ref}:{since}",
        event_type=GRACE_EXPIRED,
        occurred_at=now,
        obj={"id": ref},
        source=ProviderEvent.Source.LOCAL,
    )
    with transaction.atomic():
        fold_subscription(ref)


# --- Processing ------------------------------------------------------------------------------------------


def process_event(event_id: str) -> None:
    """Fold the event's subscription; on failure keep the event with its error for the retry sweep."""
    event = ProviderEvent.objects.filter(event_id=event_id).first()
    if event is None or event.processed_at is not None:
        return
    if not event.subscription_ref:
        # A one-off invoice or a checkout without a subscription: nothing for plans to learn.
        ProviderEvent.objects.filter(pk=event.pk).update(
            processed_at=timezone.now(), last_error="not about a subscription"
        )
        return
    try:
        with transaction.atomic():
            fold_subscription(event.subscription_ref)
    except AccountGone as exc:
        ProviderEvent.objects.filter(subscription_ref=event.subscription_ref, processed_at__isnull=True).update(
            processed_at=timezone.now(), last_error=str(exc)
        )
    except (Unresolved, AttributeError, KeyError, TypeError, ValueError) as exc:
        logger.warning("Stripe event %s (%s) not processed yet: %s", event.event_id, event.type, exc)
        ProviderEvent.objects.filter(pk=event.pk).update(attempts=event.attempts + 1, last_error=str(exc)[:2000])


@shared_task(name="billing.tasks.process_provider_event")
def process_provider_event(event_id: str) -> None:
    """Celery: process a stored event, queued by `receive_webhook` once the event is committed. Defined
    beside the function it runs, so this module queues it without importing billing.tasks (which imports
    this module); billing.tasks names it for Celery's autodiscovery, under the same task name as ever."""
    process_event(event_id)


def retry_unprocessed(*, now: datetime | None = None, settle_seconds: int = 60) -> int:
    """Process events that failed or whose task was lost; returns how many are processed now."""
    now = now or timezone.now()
    pending = ProviderEvent.objects.filter(
        processed_at__isnull=True, attempts__lt=MAX_ATTEMPTS, received_at__lt=now - timedelta(seconds=settle_seconds)
    ).values_list("event_id", flat=True)
    for event_id in list(pending):
        process_event(event_id)
    return ProviderEvent.objects.filter(processed_at__gte=now).count()


@dataclass
class SubscriptionState:
    """What the history of one Stripe subscription says, event by event."""

    ref: str
    user_id: int | None = None
    customer: str = ""
    plan_slug: str | None = None
    status: str | None = None
    period_start: datetime | None = None
    period_end: datetime | None = None
    cancel_at_period_end: bool = False
    past_due_since: datetime | None = None
    canceled_at: datetime | None = None
    ended_at: datetime | None = None
    last_payment_status: str = ""
    last_payment_at: datetime | None = None

    def set_status(self, status: str, at: datetime) -> None:
        # Grace runs from the first past-due observation of an unbroken past-due stretch.
        if status == Subscription.Status.PAST_DUE:
            if self.status != Subscription.Status.PAST_DUE:
                self.past_due_since = at
        else:
            self.past_due_since = None
        if status == Subscription.Status.CANCELED:
            self.canceled_at = self.canceled_at or at
            self.ended_at = self.ended_at or at
        else:
            self.canceled_at = self.ended_at = None
        self.status = status

    def apply(self, event: ProviderEvent) -> None:
        obj, at = event.payload, event.occurred_at
        if event.type == CHECKOUT_COMPLETED:
            user_id = obj.get("client_reference_id") or (obj.get("metadata") or {}).get("user_id")
            self.user_id = self.user_id or (int(user_id) if user_id else None)
            self.customer = self.customer or _id(obj.get("customer"))
            self.plan_slug = self.plan_slug or (obj.get("metadata") or {}).get("plan")
        elif event.type in SNAPSHOT_TYPES:
            self._apply_snapshot(obj, at, deleted=event.type == SUBSCRIPTION_DELETED)
        elif event.type == INVOICE_PAID:
            self.last_payment_status, self.last_payment_at = "paid", at
            if self.status in (Subscription.Status.PAST_DUE, Subscription.Status.INCOMPLETE):
                self.set_status(Subscription.Status.ACTIVE, at)
        elif event.type == INVOICE_FAILED:
            self.last_payment_status, self.last_payment_at = "failed", at
            if self.status in (Subscription.Status.ACTIVE, Subscription.Status.TRIALING):
                self.set_status(Subscription.Status.PAST_DUE, at)
        elif event.type == GRACE_EXPIRED and self.status == Subscription.Status.PAST_DUE:
            self.set_status(Subscription.Status.CANCELED, at)

    def _apply_snapshot(self, obj: dict, at: datetime, *, deleted: bool) -> None:
        metadata = obj.get("metadata") or {}
        self.customer = _id(obj.get("customer")) or self.customer
        if not self.user_id and metadata.get("user_id"):
            self.user_id = int(metadata["user_id"])
        items = (obj.get("items") or {}).get("data") or []
        item = items[0] if items else {}
        price = (item.get("price") or {}).get("id") or ""
        self.plan_slug = plan_slug_for_price(price) or metadata.get("plan") or self.plan_slug
        # Billing periods moved from the subscription to its items in API version 2025-03-31.
        start = item.get("current_period_start") or obj.get("current_period_start")
        end = item.get("current_period_end") or obj.get("current_period_end")
        if start and end:
            self.period_start, self.period_end = _moment(start), _moment(end)
        self.cancel_at_period_end = bool(obj.get("cancel_at_period_end"))
        status = (
            Subscription.Status.CANCELED if deleted else STATUSES.get(obj.get("status"), Subscription.Status.INCOMPLETE)
        )
        if status == Subscription.Status.CANCELED and self.status != Subscription.Status.CANCELED:
            self.canceled_at = _moment(obj.get("canceled_at"))
            self.ended_at = _moment(obj.get("ended_at"))
        self.set_status(status, at)


def _history(ref: str) -> list[ProviderEvent]:
    # Locking the subscription's events makes concurrent folds of one subscription take turns; the
    # later one then sees every event the earlier one saw, and more.
    events = list(ProviderEvent.objects.select_for_update().filter(subscription_ref=ref))
    return sorted(events, key=lambda e: (e.occurred_at, SAME_SECOND_ORDER.get(e.type, 9), e.event_id))


def _link_customer(user_id: int, customer: str) -> None:
    if customer and not BillingCustomer.objects.filter(provider_customer_id=customer).exists():
        BillingCustomer.objects.get_or_create(
            user_id=user_id, defaults={"provider": Subscription.Provider.STRIPE, "provider_customer_id": customer}
        )


def _resolve_user(state: SubscriptionState) -> int:
    if state.user_id is None and state.customer:
        state.user_id = (
            BillingCustomer.objects.filter(provider_customer_id=state.customer)
            .values_list("user_id", flat=True)
            .first()
        )
    if (
        state.user_id is not None
        and state.status == Subscription.Status.CANCELED
        and not get_user_model().objects.filter(pk=state.user_id).exists()
    ):
        raise AccountGone(f"the account of Stripe subscription {state.ref} was deleted")
    if state.user_id is None or not get_user_model().objects.filter(pk=state.user_id).exists():
        raise Unresolved(f"no user is known for Stripe subscription {state.ref} (customer {state.customer or '?'})")
    return state.user_id


def fold_subscription(ref: str) -> Subscription | None:
    """Recompute the stored subscription from its whole history; mark that history processed.

    Call inside a transaction. Returns None while only checkout or invoice events are known (the
    subscription's own event, which carries its period, is still to come).
    """
    history = _history(ref)
    state = SubscriptionState(ref)
    for event in history:
        state.apply(event)
    subscription = None
    if state.status is None or state.period_start is None:
        if state.user_id and state.customer:
            _link_customer(state.user_id, state.customer)
    else:
        user_id = _resolve_user(state)
        plan = Plan.objects.filter(slug=state.plan_slug).first() if state.plan_slug else None
        if plan is None:
            raise Unresolved(f"Stripe subscription {ref} is for an unknown price; set STRIPE_PRICE_<SLUG> for its plan")
        _link_customer(user_id, state.customer)
        existing = (
            Subscription.objects.filter(provider=Subscription.Provider.STRIPE, provider_subscription_id=ref)
            .values("current_period_start", "usage_period_start")
            .first()
        )
        if existing is None:
            # A new subscription counts the usage of the period the user was in as it began.
            user = get_user_model().objects.get(pk=user_id)
            usage_start = selectors.usage_carried_from(user, state.period_start)
        elif existing["current_period_start"] == state.period_start:
            usage_start = existing["usage_period_start"]
        else:
            usage_start = None  # renewed: the new period counts from its own start
        subscription, _ = Subscription.objects.update_or_create(
            provider=Subscription.Provider.STRIPE,
            provider_subscription_id=ref,
            defaults={
                "user_id": user_id,
                "plan": plan,
                "status": state.status,
                "provider_customer_id": state.customer,
                "current_period_start": state.period_start,
                "current_period_end": state.period_end,
                "cancel_at_period_end": state.cancel_at_period_end,
                "past_due_since": state.past_due_since,
                "usage_period_start": usage_start,
                "canceled_at": state.canceled_at,
                "ended_at": state.ended_at,
                "last_payment_status": state.last_payment_status,
                "last_payment_at": state.last_payment_at,
            },
        )
    ProviderEvent.objects.filter(pk__in=[e.pk for e in history], processed_at__isnull=True).update(
        processed_at=timezone.now(), last_error=""
    )
    return subscription

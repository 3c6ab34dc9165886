"""What a payment provider does for billing; dev.py and stripe.py implement it.

A provider talks to the payment service and nothing else of billing's: a change it makes there may
come back with the subscription as the service now reports it (`Observed`, Stripe's), which
billing.services.subscriptions records in the subscription's history (services/stripe_events.py), the
one place its state is decided. The development provider is its own payment service: it keeps the
subscription rows itself and observes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from billing.models import Plan, Subscription


@dataclass(frozen=True)
class ReturnUrls:
    """Absolute URLs the provider's pages send the user back to."""

    success: str
    cancel: str
    billing: str


#: A subscription as the payment service's API returned it after a change or a read (Stripe's object).
Observed = dict[str, Any]


@dataclass(frozen=True)
class NextStep:
    """Where to send the user after asking for a plan change, and what to tell them."""

    url: str
    message: str = ""


class PaymentProvider(Protocol):
    name: str
    label: str
    #: False for the dev provider: plan changes are free and immediate, and the pages say so.
    takes_payment: bool
    #: True when a subscription's state is folded from the history of what the service reported (Stripe):
    #: billing records what it decides (the end of a grace period) in that history too.
    keeps_history: bool

    # Each plan change either happens here (None: the caller tells the user what changed) or needs the
    # provider's own page (a NextStep to send the user to). billing.services.subscriptions decides which
    # of these applies (the direction of the change) and what the user is told.

    def subscribe(self, user, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        """Start a paid subscription for a user without one (checkout, or at once)."""
        ...

    def upgrade(self, subscription: Subscription, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        """Move to a richer plan now, keeping the period (and so its usage)."""
        ...

    def schedule_downgrade(self, subscription: Subscription, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        """Move to a smaller paid plan when the paid period ends."""
        ...

    def schedule_cancel(self, subscription: Subscription) -> Observed | None:
        """Move to the free plan (cancel) when the paid period ends."""
        ...

    def keep(self, subscription: Subscription) -> Observed | None:
        """Undo a scheduled downgrade or cancellation."""
        ...

    def cancel_now(self, subscription: Subscription, now: datetime) -> Observed | None:
        """End the subscription at once (the account is being deleted)."""
        ...

    def portal_url(self, user, *, return_url: str) -> str | None:
        """The provider's self-service page (payment method, invoices, cancel), if it has one."""
        ...

    def refresh(self, subscription: Subscription, now: datetime) -> Observed | None:
        """Bring a subscription whose period has ended up to date (the period rollover)."""
        ...

    def end_after_grace(self, subscription: Subscription, now: datetime) -> None:
        """End a past-due subscription whose grace period ran out (billing has recorded the decision
        first when the provider `keeps_history`)."""
        ...


def end_subscription(subscription: Subscription, at: datetime) -> None:
    """End a subscription whose provider keeps its rows itself (dev, gift): canceled and ended `at`."""
    subscription.status = Subscription.Status.CANCELED
    subscription.canceled_at = subscription.ended_at = at
    subscription.save(update_fields=["status", "canceled_at", "ended_at", "updated"])

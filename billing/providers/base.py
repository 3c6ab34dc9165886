"""What a payment provider does for billing; dev.py and stripe.py implement it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from billing.models import Plan, Subscription


@dataclass(frozen=True)
class ReturnUrls:
    """Absolute URLs the provider's pages send the user back to."""

    success: str
    cancel: str
    billing: str


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
        """Move to a smaller plan, or to the free one (cancel), when the paid period ends."""
        ...

    def keep(self, subscription: Subscription) -> None:
        """Undo a scheduled downgrade or cancellation."""
        ...

    def cancel_now(self, subscription: Subscription, now: datetime) -> None:
        """End the subscription at once (the account is being deleted)."""
        ...

    def portal_url(self, user, *, return_url: str) -> str | None:
        """The provider's self-service page (payment method, invoices, cancel), if it has one."""
        ...

    def refresh(self, subscription: Subscription, now: datetime) -> None:
        """Bring a subscription whose period has ended up to date (the period rollover)."""
        ...

    def end_after_grace(self, subscription: Subscription, now: datetime) -> None:
        """End a past-due subscription whose grace period ran out."""
        ...

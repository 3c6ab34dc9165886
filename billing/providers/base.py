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

    def change_plan(self, user, plan: Plan, *, urls: ReturnUrls) -> NextStep:
        """Start moving `user` to `plan` (checkout, portal, or at once)."""
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

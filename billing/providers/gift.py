"""A plan staff give at no charge, for a fixed time (`billing.services.subscriptions.give_plan`).

Its subscription row (provider "gift") gives a month's allowance each month from the day it was given
(`selectors.subscription_period`), ends when its period does, and is never renewed, charged, or changed
by the person (they choose a plan of their own once it has ended). It is given only to someone without a
subscription of their own, so nobody pays for a plan a gift hides.
"""

from __future__ import annotations

from datetime import datetime

from django.utils.translation import gettext_lazy

from billing.models import Plan, Subscription
from billing.providers.base import NextStep, ReturnUrls, end_subscription
from billing.selectors import gift_reason
from config.refusals import BadInput


class GiftProvider:
    name = "gift"
    label = gettext_lazy("Given by staff (no charge)")
    takes_payment = False
    keeps_history = False

    def _unchangeable(self, subscription: Subscription) -> BadInput:
        return BadInput(gift_reason(subscription))

    def subscribe(self, user, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        raise BadInput(gettext_lazy("A plan is given by staff in the console, not chosen."))

    def upgrade(self, subscription: Subscription, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        raise self._unchangeable(subscription)

    def schedule_downgrade(self, subscription: Subscription, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        raise self._unchangeable(subscription)

    def schedule_cancel(self, subscription: Subscription) -> None:
        return None  # it ends with its period already

    def keep(self, subscription: Subscription) -> None:
        raise self._unchangeable(subscription)

    def cancel_now(self, subscription: Subscription, now: datetime) -> None:
        end_subscription(subscription, now)

    def portal_url(self, user, *, return_url: str) -> str | None:
        return None

    def refresh(self, subscription: Subscription, now: datetime) -> None:
        end_subscription(subscription, subscription.current_period_end)  # it is never renewed

    def end_after_grace(self, subscription: Subscription, now: datetime) -> None:
        self.cancel_now(subscription, now)

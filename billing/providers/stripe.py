"""Stripe, through its official SDK: Checkout to subscribe, the Customer Portal to change plans, and
`cancel_at_period_end` to cancel (or undo it) when the period ends.

Subscription state never comes from here: webhook events, and the subscription as Stripe returns it
after a change or a read (what these methods return), are stored and folded by services/stripe_events.py,
which billing.services.subscriptions calls. This module talks to Stripe and imports no service.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from urllib.parse import urlencode

import stripe
from django.conf import settings
from django.db import transaction
from django.utils import translation
from django.utils.translation import gettext as _

from billing.models import BillingCustomer, Plan, Subscription
from billing.providers.base import NextStep, Observed, ReturnUrls
from billing.stripe_prices import price_for
from config.refusals import Busy

logger = logging.getLogger(__name__)

#: The product's languages as Stripe's Checkout and customer portal name them. Arabic is not one of
#: Checkout's, so for it Stripe reads the browser's languages ("auto").
STRIPE_LOCALES = {
    "en": "en",
    "fr": "fr",
    "de": "de",
    "es": "es",
    "pt-br": "pt-BR",
    "it": "it",
    "ja": "ja",
    "zh-hans": "zh",
}


def stripe_locale() -> str:
    """Stripe's pages in the language of the page that sent the person there."""
    return STRIPE_LOCALES.get(translation.get_language() or "", "auto")


def client() -> stripe.StripeClient:
    return stripe.StripeClient(
        settings.STRIPE_SECRET_KEY, base_addresses={"api": settings.STRIPE_API_BASE}, max_network_retries=2
    )


def _unavailable(exc: stripe.StripeError) -> Busy:
    logger.error("Stripe request failed: %s", exc, exc_info=exc)
    return Busy(
        _("The payment service did not answer as expected. Nothing was charged; try again in a minute."),
        retry_after=60,
    )


def ensure_customer(user) -> str:
    """The user's Stripe customer id, creating the customer on first use."""
    existing = BillingCustomer.objects.filter(user=user, provider=Subscription.Provider.STRIPE).first()
    if existing is not None:
        return existing.provider_customer_id
    # The idempotency key makes a double click (or two tabs) create one Stripe customer, not two.
    key = "sglchat-customer-" + hashlib.sha256(f"{user.pk}:{user.email}".encode()).hexdigest()[:32]
    try:
        customer = client().v1.customers.create(
            params={"email": user.email, "metadata": {"user_id": str(user.pk)}}, options={"idempotency_key": key}
        )
    except stripe.StripeError as exc:
        raise _unavailable(exc) from exc
    with transaction.atomic():
        row, _created = BillingCustomer.objects.get_or_create(
            user=user, defaults={"provider": Subscription.Provider.STRIPE, "provider_customer_id": customer.id}
        )
    return row.provider_customer_id


def _with_query(url: str, **params: str) -> str:
    # Stripe fills in {CHECKOUT_SESSION_ID} itself, so it must reach Stripe unescaped.
    query = urlencode(params, safe="{}")
    return url + ("&" if "?" in url else "?") + query


def fetch_subscription(subscription_id: str) -> dict:
    return client().v1.subscriptions.retrieve(subscription_id).to_dict()


def cancel_subscription(subscription_id: str) -> None:
    client().v1.subscriptions.cancel(subscription_id)


class StripeProvider:
    name = "stripe"
    label = "Stripe"
    takes_payment = True
    keeps_history = True

    def subscribe(self, user, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        return NextStep(self._checkout(user, plan, urls))

    def upgrade(self, subscription: Subscription, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        # The Customer Portal shows the proration and takes the confirmation; the period stays.
        return self._portal_flow(subscription, "subscription_update", urls)

    def schedule_downgrade(self, subscription: Subscription, plan: Plan, *, urls: ReturnUrls) -> NextStep | None:
        # A smaller paid plan is picked in the portal (configure it to schedule downgrades at the period end).
        return self._portal_flow(subscription, "subscription_update", urls)

    def schedule_cancel(self, subscription: Subscription) -> Observed:
        return self._set_cancel_at_period_end(subscription, True)

    def keep(self, subscription: Subscription) -> Observed:
        return self._set_cancel_at_period_end(subscription, False)

    def cancel_now(self, subscription: Subscription, now: datetime) -> Observed:
        try:
            return client().v1.subscriptions.cancel(subscription.provider_subscription_id).to_dict()
        except stripe.StripeError as exc:
            raise _unavailable(exc) from exc

    def _set_cancel_at_period_end(self, subscription: Subscription, cancel: bool) -> Observed:
        """Stripe keeps the plan (and charges nothing more) until the period ends, then deletes the
        subscription: its customer.subscription.updated / .deleted webhooks carry that out here."""
        try:
            return (
                client()
                .v1.subscriptions.update(subscription.provider_subscription_id, params={"cancel_at_period_end": cancel})
                .to_dict()
            )
        except stripe.StripeError as exc:
            raise _unavailable(exc) from exc

    def _portal_flow(self, subscription: Subscription, kind: str, urls: ReturnUrls) -> NextStep:
        flow = {"type": kind, kind: {"subscription": subscription.provider_subscription_id}}
        try:
            session = client().v1.billing_portal.sessions.create(
                params={
                    "customer": subscription.provider_customer_id or ensure_customer(subscription.user),
                    "return_url": urls.billing,
                    "flow_data": flow,
                    "locale": stripe_locale(),
                }
            )
        except stripe.StripeError as exc:
            raise _unavailable(exc) from exc
        return NextStep(session.url)

    def _checkout(self, user, plan: Plan, urls: ReturnUrls) -> str:
        price = price_for(plan)
        customer = ensure_customer(user)
        metadata = {"user_id": str(user.pk), "plan": plan.slug}
        try:
            session = client().v1.checkout.sessions.create(
                params={
                    "mode": "subscription",
                    "customer": customer,
                    "client_reference_id": str(user.pk),
                    "line_items": [{"price": price, "quantity": 1}],
                    "success_url": _with_query(urls.success, session_id="{CHECKOUT_SESSION_ID}"),
                    "cancel_url": urls.cancel,
                    "metadata": metadata,
                    "subscription_data": {"metadata": metadata},
                    "locale": stripe_locale(),
                }
            )
        except stripe.StripeError as exc:
            raise _unavailable(exc) from exc
        return session.url

    def portal_url(self, user, *, return_url: str) -> str | None:
        customer = BillingCustomer.objects.filter(user=user, provider=Subscription.Provider.STRIPE).first()
        if customer is None:
            return None
        try:
            session = client().v1.billing_portal.sessions.create(
                params={"customer": customer.provider_customer_id, "return_url": return_url, "locale": stripe_locale()}
            )
        except stripe.StripeError as exc:
            raise _unavailable(exc) from exc
        return session.url

    def refresh(self, subscription: Subscription, now: datetime) -> Observed | None:
        try:
            return fetch_subscription(subscription.provider_subscription_id)
        except stripe.StripeError as exc:
            logger.warning(
                "could not read Stripe subscription %s at rollover: %s", subscription.provider_subscription_id, exc
            )
            return None

    def end_after_grace(self, subscription: Subscription, now: datetime) -> None:
        try:
            # Stop Stripe retrying the card for a service that has ended; its customer.subscription.deleted
            # event then agrees with the end billing recorded before calling this.
            cancel_subscription(subscription.provider_subscription_id)
        except stripe.StripeError as exc:
            logger.warning(
                "could not cancel Stripe subscription %s after grace: %s", subscription.provider_subscription_id, exc
            )

"""Payment providers: "dev" (plan changes on click, the embedded default) and "stripe"; and "gift", a plan
staff give at no charge."""

from __future__ import annotations

from django.conf import settings

from billing.providers.base import NextStep, PaymentProvider, ReturnUrls
from billing.providers.dev import DevProvider
from billing.providers.gift import GiftProvider
from billing.providers.stripe import StripeProvider

PROVIDERS: dict[str, type] = {"dev": DevProvider, "stripe": StripeProvider, "gift": GiftProvider}

__all__ = ["NextStep", "PaymentProvider", "ReturnUrls", "get_provider"]


def get_provider(name: str | None = None) -> PaymentProvider:
    """The provider configured by PAYMENT_PROVIDER, or the one named (e.g. the one a subscription came from)."""
    return PROVIDERS[name or settings.PAYMENT_PROVIDER]()

"""Payment providers: "dev" (plan changes on click, the embedded default) and "stripe"."""

from __future__ import annotations

from django.conf import settings

from billing.providers.base import NextStep, PaymentProvider, ReturnUrls
from billing.providers.dev import DevProvider
from billing.providers.stripe import StripeProvider

PROVIDERS: dict[str, type] = {"dev": DevProvider, "stripe": StripeProvider}

__all__ = ["NextStep", "PaymentProvider", "ReturnUrls", "get_provider"]


def get_provider(name: str | None = None) -> PaymentProvider:
    """The provider configured by PAYMENT_PROVIDER, or the one named (e.g. the one a subscription came from)."""
    return PROVIDERS[name or settings.PAYMENT_PROVIDER]()

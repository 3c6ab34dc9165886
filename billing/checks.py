"""Deployment checks of billing (`manage.py check --deploy`; `make check-deploy`)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register


@register(Tags.security, deploy=True)
def payments_are_taken(app_configs, **kwargs) -> list[CheckMessage]:
    """Development payments hand every plan out for nothing. Production starts on them only as a declared
    demo (PAYMENT_PROVIDER_DEV_IN_PRODUCTION=demo), and even then a deployment check must not pass."""
    if settings.PAYMENT_PROVIDER != "dev":
        return []
    return [
        Error(
            "PAYMENT_PROVIDER=dev gives every plan away: anyone who signs up can choose Pro and pay nothing.",
            hint="Take payment through Stripe: PAYMENT_PROVIDER=stripe with STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET "
            "and a STRIPE_PRICE_<SLUG> for each paid plan (docs/billing.md, Configuring Stripe).",
            id="billing.E001",
        )
    ]

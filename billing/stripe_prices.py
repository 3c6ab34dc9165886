"""Which Stripe price is which plan (STRIPE_PRICE_<SLUG> settings), in both directions."""

from django.conf import settings
from django.utils.translation import gettext as _

from billing.models import Plan
from config.refusals import NotAllowed


def price_for(plan: Plan) -> str:
    price = settings.STRIPE_PRICES.get(plan.slug, "")
    if not price:
        raise NotAllowed(
            _("The %(plan)s plan cannot be bought yet (no Stripe price is configured for it).") % {"plan": plan.name}
        )
    return price


def plan_slug_for_price(price_id: str) -> str | None:
    return next((slug for slug, price in settings.STRIPE_PRICES.items() if price and price == price_id), None)

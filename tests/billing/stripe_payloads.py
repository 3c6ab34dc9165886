"""Webhook events in Stripe's shapes (API version 2025-03-31 and later), signed as Stripe signs them."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

from django.urls import reverse

WEBHOOK_SECRET = "whsec_test_secret"
PRICES = {"plus": "price_plus_monthly", "pro": "price_pro_monthly"}


def sign(payload: str, secret: str = WEBHOOK_SECRET, timestamp: int | None = None) -> str:
    """Stripe's scheme: t=<unix time>,v1=HMAC-SHA256(secret, "<t>.<payload>")."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{timestamp}.{payload}".encode(), hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def event(event_id: str, event_type: str, created: int, obj: dict) -> dict:
    return {
        "id": event_id,
        "object": "event",
        "api_version": "2025-03-31.basil",
        "created": created,
        "type": event_type,
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "data": {"object": obj},
    }


def subscription(
    sub_id: str,
    *,
    customer: str,
    plan: str,
    status: str,
    start: int,
    end: int,
    user_id: int | None = None,
    cancel_at_period_end: bool = False,
    **extra,
) -> dict:
    metadata = {"user_id": str(user_id), "plan": plan} if user_id else {}
    return {
        "id": sub_id,
        "object": "subscription",
        "customer": customer,
        "status": status,
        "livemode": False,
        "cancel_at_period_end": cancel_at_period_end,
        "canceled_at": None,
        "ended_at": None,
        "metadata": metadata,
        "items": {
            "object": "list",
            "data": [
                {
                    "id": f"si_{sub_id}",
                    "object": "subscription_item",
                    "quantity": 1,
                    "price": {"id": PRICES[plan], "object": "price", "recurring": {"interval": "month"}},
                    "current_period_start": start,
                    "current_period_end": end,
                }
            ],
        },
        **extra,
    }


def checkout_session(session_id: str, *, customer: str, sub_id: str, user_id: int, plan: str) -> dict:
    return {
        "id": session_id,
        "object": "checkout.session",
        "mode": "subscription",
        "status": "complete",
        "payment_status": "paid",
        "customer": customer,
        "subscription": sub_id,
        "client_reference_id": str(user_id),
        "metadata": {"user_id": str(user_id), "plan": plan},
    }


def invoice(invoice_id: str, *, customer: str, sub_id: str, paid: bool) -> dict:
    return {
        "id": invoice_id,
        "object": "invoice",
        "customer": customer,
        "status": "paid" if paid else "open",
        "parent": {"type": "subscription_details", "subscription_details": {"subscription": sub_id, "metadata": {}}},
    }


def post_webhook(client, payload: dict | str, *, signature: str | None = None):
    body = payload if isinstance(payload, str) else json.dumps(payload)
    headers = {"HTTP_STRIPE_SIGNATURE": signature if signature is not None else sign(body)}
    return client.post(reverse("billing:stripe_webhook"), data=body, content_type="application/json", **headers)

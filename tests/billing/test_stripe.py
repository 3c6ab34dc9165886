"""Upgrading through Stripe: Checkout with the right price and customer, then signed webhooks make the
plan effective; bad signatures change nothing; replayed and shuffled events end in the same state.

Stripe's API is the stand-in on a loopback port (the real SDK talks to it); webhooks are signed with
Stripe's real scheme and verified by the SDK's stripe.Webhook.construct_event.
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from accounts.models import User
from billing.models import BillingCustomer, ProviderEvent, Subscription
from billing.selectors import effective_plan
from tests.billing.stripe_payloads import (
    PRICES,
    checkout_session,
    event,
    invoice,
    post_webhook,
    sign,
    subscription,
)
from tests.billing.stripe_standin import MISSING_PRICE

MONTH = 30 * 24 * 3600
# Events carry Stripe's own timestamps: the story starts 40 days ago (midnight UTC), so the renewed
# period it ends in is the current one.
T0 = (int(time.time()) // 86400 - 40) * 86400


@pytest.fixture
def deliver(client, django_capture_on_commit_callbacks):
    """Post one signed webhook and run what it queued (Celery runs eagerly in tests)."""

    def post(payload, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return post_webhook(client, payload, **kwargs)

    return post


def upgrade(client, user, slug: str):
    client.force_login(user)
    return client.post(reverse("billing:choose_plan", args=[slug]))


def test_upgrading_creates_a_checkout_session_with_the_plans_price_and_the_users_customer(
    client, free_user, stripe_api
):
    response = upgrade(client, free_user, "plus")

    assert response.status_code == 302
    assert response.url.startswith("https://checkout.stripe.com/c/pay/cs_test_")
    [customer_call] = stripe_api.calls("POST", "/v1/customers")
    assert customer_call.params["email"] == free_user.email
    assert customer_call.params["metadata[user_id]"] == str(free_user.pk)
    assert customer_call.headers["Authorization"] == "Bearer sk_test_standin"
    assert customer_call.headers.get("Idempotency-Key")
    customer_id = BillingCustomer.objects.get(user=free_user).provider_customer_id
    [session_call] = stripe_api.calls("POST", "/v1/checkout/sessions")
    assert session_call.params["mode"] == "subscription"
    assert session_call.params["customer"] == customer_id
    assert session_call.params["line_items[0][price]"] == PRICES["plus"]
    assert session_call.params["line_items[0][quantity]"] == "1"
    assert session_call.params["client_reference_id"] == str(free_user.pk)
    assert session_call.params["subscription_data[metadata][plan]"] == "plus"
    assert session_call.params["success_url"].endswith("/billing/checkout/done/?session_id={CHECKOUT_SESSION_ID}")
    assert session_call.params["cancel_url"].endswith("/billing/plans/")
    # Nothing changes until Stripe confirms the payment.
    assert effective_plan(free_user).slug == "free"

    # A second attempt reuses the Stripe customer.
    upgrade(client, free_user, "pro")
    assert len(stripe_api.calls("POST", "/v1/customers")) == 1
    assert stripe_api.calls("POST", "/v1/checkout/sessions")[-1].params["customer"] == customer_id
    assert stripe_api.calls("POST", "/v1/checkout/sessions")[-1].params["line_items[0][price]"] == PRICES["pro"]


def test_signed_checkout_completed_and_subscription_created_make_the_plan_effective(
    client, free_user, stripe_api, deliver
):
    upgrade(client, free_user, "plus")
    customer = BillingCustomer.objects.get(user=free_user).provider_customer_id

    completed = deliver(
        event(
            "evt_1",
            "checkout.session.completed",
            T0,
            checkout_session("cs_1", customer=customer, sub_id="sub_1", user_id=free_user.pk, plan="plus"),
        )
    )
    assert completed.status_code == 200
    assert effective_plan(free_user).slug == "free"  # the subscription itself has not been seen yet

    created = deliver(
        event(
            "evt_2",
            "customer.subscription.created",
            T0,
            subscription("sub_1", customer=customer, plan="plus", status="active", start=T0, end=T0 + MONTH),
        )
    )
    assert created.status_code == 200

    assert effective_plan(free_user).slug == "plus"
    sub = Subscription.objects.get(provider_subscription_id="sub_1")
    assert (sub.user, sub.status, sub.provider, sub.provider_customer_id) == (free_user, "active", "stripe", customer)
    assert sub.current_period_end == datetime.fromtimestamp(T0 + MONTH, tz=UTC)
    assert not ProviderEvent.objects.filter(processed_at__isnull=True).exists()


@pytest.mark.parametrize("forgery", ["made up", "signed for other bytes", "signed with another secret", "missing"])
def test_a_badly_signed_webhook_gets_400_and_changes_nothing(client, free_user, stripe_api, forgery):
    payload = json.dumps(
        event(
            "evt_bad",
            "customer.subscription.created",
            T0,
            subscription(
                "sub_bad", customer="cus_x", plan="pro", status="active", start=T0, end=T0 + MONTH, user_id=free_user.pk
            ),
        )
    )
    signature = {
        "made up": "t=1,v1=" + "0" * 64,
        "signed for other bytes": sign(payload.replace("active", "trialing")),
        "signed with another secret": sign(payload, secret="whsec_someone_else"),
        "missing": "",
    }[forgery]

    response = post_webhook(client, payload, signature=signature)

    assert response.status_code == 400
    assert "Stripe-Signature" in response.json()["error"]["message"]
    assert not ProviderEvent.objects.exists()
    assert not Subscription.objects.exists()
    assert effective_plan(free_user).slug == "free"


def test_a_stale_signature_is_refused_too(client, free_user, stripe_api):
    payload = json.dumps(
        event(
            "evt_old",
            "customer.subscription.created",
            T0,
            subscription(
                "sub_old", customer="cus_x", plan="pro", status="active", start=T0, end=T0 + MONTH, user_id=free_user.pk
            ),
        )
    )

    response = post_webhook(client, payload, signature=sign(payload, timestamp=T0))  # replayed long after

    assert response.status_code == 400
    assert not Subscription.objects.exists()


def _signed_subscription_event(**changes) -> dict:
    sub = subscription("sub_odd", customer="cus_x", plan="pro", status="active", start=T0, end=T0 + MONTH)
    return {**event("evt_odd", "customer.subscription.created", T0, sub), **changes}


MALFORMED_EVENTS = {
    "no id": {k: v for k, v in _signed_subscription_event().items() if k != "id"},
    "an empty id": _signed_subscription_event(id=""),
    "an id that is a list": _signed_subscription_event(id=["evt_1"]),
    "an id too long to store": _signed_subscription_event(id="evt_" + "x" * 300),
    "a type that is a list": _signed_subscription_event(type=["customer.subscription.created"]),
    "no type": {k: v for k, v in _signed_subscription_event().items() if k != "type"},
    "no created time": {k: v for k, v in _signed_subscription_event().items() if k != "created"},
    "a created time in words": _signed_subscription_event(created="yesterday"),
    "a created time past the year 9999": _signed_subscription_event(created=10**20),
    "no data": {k: v for k, v in _signed_subscription_event().items() if k != "data"},
    "data that is a list": _signed_subscription_event(data=[1]),
    "data.object that is a list": _signed_subscription_event(data={"object": [1]}),
    "a subscription without an id": _signed_subscription_event(data={"object": {"object": "subscription"}}),
    "a subscription id that is an object": _signed_subscription_event(data={"object": {"id": {"a": 1}}}),
    "a subscription id too long to store": _signed_subscription_event(data={"object": {"id": "sub_" + "x" * 300}}),
    "a list, not an event": [_signed_subscription_event()],
    "JSON nested 5,000 deep": "[" * 5000 + "]" * 5000,
    "not JSON": "{'id': 'evt_1'}",
}


@pytest.mark.parametrize("malformed", MALFORMED_EVENTS)
def test_a_validly_signed_but_malformed_event_gets_400_with_a_sentence_and_stores_nothing(
    client, free_user, stripe_api, malformed
):
    payload = MALFORMED_EVENTS[malformed]
    body = payload if isinstance(payload, str) else json.dumps(payload)

    response = post_webhook(client, body)

    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["message"]
    assert not ProviderEvent.objects.exists()
    assert not Subscription.objects.exists()


def test_an_event_whose_inner_shapes_are_odd_is_kept_with_its_error_not_a_500(client, free_user, stripe_api, deliver):
    checkout = checkout_session("cs_odd", customer="cus_x", sub_id="sub_odd", user_id=free_user.pk, plan="plus")
    checkout.update(client_reference_id=None, metadata=["not", "an", "object"])
    paid = invoice("in_odd", customer="cus_x", sub_id="sub_odd", paid=True)
    paid["parent"] = ["not", "an", "object"]

    assert deliver(event("evt_checkout", "checkout.session.completed", T0, checkout)).status_code == 200
    assert deliver(event("evt_invoice", "invoice.paid", T0 + 1, paid)).status_code == 200

    kept = ProviderEvent.objects.get(event_id="evt_checkout")
    assert kept.processed_at is None and kept.attempts == 1 and kept.last_error
    # An invoice whose subscription cannot be read is not about a subscription (as a one-off invoice).
    assert ProviderEvent.objects.get(event_id="evt_invoice").subscription_ref == ""
    assert effective_plan(free_user).slug == "free"


def lifecycle(user_id: int, customer: str) -> list[dict]:
    """A year's worth of one subscription: signed up, paid, a failed renewal, recovered, set to cancel."""
    t1, t2, t3 = T0 + MONTH, T0 + MONTH + 3 * 86400, T0 + MONTH + 5 * 86400
    sub = "sub_life"

    def snap(status, start, end, **extra):
        return subscription(sub, customer=customer, plan="pro", status=status, start=start, end=end, **extra)

    return [
        event(
            "evt_a",
            "checkout.session.completed",
            T0,
            checkout_session("cs_life", customer=customer, sub_id=sub, user_id=user_id, plan="pro"),
        ),
        event("evt_b", "customer.subscription.created", T0, snap("incomplete", T0, T0 + MONTH)),
        event("evt_c", "invoice.paid", T0, invoice("in_1", customer=customer, sub_id=sub, paid=True)),
        event("evt_d", "customer.subscription.updated", T0, snap("active", T0, T0 + MONTH)),
        event("evt_e", "invoice.payment_failed", t1, invoice("in_2", customer=customer, sub_id=sub, paid=False)),
        event("evt_f", "customer.subscription.updated", t1, snap("past_due", t1, t1 + MONTH)),
        event("evt_g", "invoice.payment_failed", t2, invoice("in_2", customer=customer, sub_id=sub, paid=False)),
        event("evt_h", "invoice.paid", t3, invoice("in_2", customer=customer, sub_id=sub, paid=True)),
        event("evt_i", "customer.subscription.updated", t3, snap("active", t1, t1 + MONTH)),
        event(
            "evt_j", "customer.subscription.updated", t3 + 60, snap("active", t1, t1 + MONTH, cancel_at_period_end=True)
        ),
    ]


def state_of(user) -> tuple:
    sub = Subscription.objects.get(provider_subscription_id="sub_life")
    return (
        sub.user_id,
        sub.plan.slug,
        sub.status,
        sub.current_period_start,
        sub.current_period_end,
        sub.cancel_at_period_end,
        sub.past_due_since,
        sub.canceled_at,
        sub.ended_at,
        sub.last_payment_status,
        sub.last_payment_at,
        sub.provider_customer_id,
        effective_plan(user).slug,
    )


def forget_everything() -> None:
    Subscription.objects.all().delete()
    ProviderEvent.objects.all().delete()
    BillingCustomer.objects.all().delete()


@pytest.mark.parametrize("ending", ["set to cancel", "deleted"])
def test_every_event_replayed_three_times_in_shuffled_order_ends_in_the_same_state(
    free_user, stripe_api, deliver, ending
):
    events = lifecycle(free_user.pk, "cus_life")
    if ending == "deleted":
        ended = subscription(
            "sub_life",
            customer="cus_life",
            plan="pro",
            status="canceled",
            start=T0 + MONTH,
            end=T0 + 2 * MONTH,
            ended_at=T0 + 40 * 86400,
            canceled_at=T0 + 40 * 86400,
        )
        events.append(event("evt_k", "customer.subscription.deleted", T0 + 40 * 86400, ended))

    # Delivered once, in order: the reference.
    for payload in events:
        assert deliver(payload).status_code == 200
    expected = state_of(free_user)

    for seed in range(3):
        forget_everything()
        shuffled = events * 3
        random.Random(seed).shuffle(shuffled)
        for payload in shuffled:
            assert deliver(payload).status_code == 200
        assert state_of(free_user) == expected
        assert ProviderEvent.objects.count() == len(events)  # each stored once, however often it came

    if ending == "deleted":
        assert expected[2] == "canceled" and expected[-1] == "free"
        assert expected[8] == datetime.fromtimestamp(T0 + 40 * 86400, tz=UTC)
    else:
        # Recovered from the failed renewal, paid, and set to end at the period's close.
        assert expected[1:6] == (
            "pro",
            "active",
            datetime.fromtimestamp(T0 + MONTH, tz=UTC),
            datetime.fromtimestamp(T0 + 2 * MONTH, tz=UTC),
            True,
        )
        assert (expected[6], expected[9], expected[-1]) == (None, "paid", "pro")


def test_a_failed_renewal_makes_the_subscription_past_due_from_the_first_failure(free_user, stripe_api, deliver):
    for payload in lifecycle(free_user.pk, "cus_life")[:7]:  # up to the second failure
        deliver(payload)

    sub = Subscription.objects.get(provider_subscription_id="sub_life")
    assert sub.status == "past_due"
    assert sub.past_due_since == datetime.fromtimestamp(T0 + MONTH, tz=UTC)  # the first failure, not the retry
    assert sub.last_payment_status == "failed"


def test_an_event_for_an_unknown_customer_waits_until_checkout_tells_whose_it_is(free_user, stripe_api, deliver):
    created = event(
        "evt_1",
        "customer.subscription.created",
        T0,
        subscription("sub_9", customer="cus_unknown", plan="plus", status="active", start=T0, end=T0 + MONTH),
    )

    assert deliver(created).status_code == 200  # stored: Stripe must not retry for our sake
    waiting = ProviderEvent.objects.get(event_id="evt_1")
    assert waiting.processed_at is None
    assert "no user is known" in waiting.last_error

    deliver(
        event(
            "evt_2",
            "checkout.session.completed",
            T0 + 1,
            checkout_session("cs_9", customer="cus_unknown", sub_id="sub_9", user_id=free_user.pk, plan="plus"),
        )
    )

    assert effective_plan(free_user).slug == "plus"
    assert not ProviderEvent.objects.filter(processed_at__isnull=True).exists()
    assert BillingCustomer.objects.get(user=free_user).provider_customer_id == "cus_unknown"


def test_event_types_billing_does_not_use_are_acknowledged_and_not_stored(client, db, stripe_api):
    response = post_webhook(client, event("evt_x", "customer.created", T0, {"id": "cus_1", "object": "customer"}))

    assert response.status_code == 200
    assert response.json() == {"received": True, "handled": False}
    assert not ProviderEvent.objects.exists()


def test_the_webhook_endpoint_only_takes_posts(client, stripe_api):
    assert client.get(reverse("billing:stripe_webhook")).status_code == 405


def test_a_subscriber_upgrades_in_the_customer_portal_and_cancels_at_the_period_end(
    client, free_user, stripe_api, deliver
):
    created = subscription(
        "sub_p", customer="cus_p", plan="plus", status="active", start=T0, end=T0 + 10 * MONTH, user_id=free_user.pk
    )
    deliver(event("evt_1", "customer.subscription.created", T0, created))
    stripe_api.subscriptions["sub_p"] = created
    assert effective_plan(free_user).slug == "plus"

    to_pro = upgrade(client, free_user, "pro")
    to_free = upgrade(client, free_user, "free")

    assert to_pro.status_code == 302
    assert to_pro.url.startswith("https://billing.stripe.com/p/session/")
    [update] = stripe_api.calls("POST", "/v1/billing_portal/sessions")
    assert update.params["customer"] == "cus_p"
    assert update.params["flow_data[type]"] == "subscription_update"
    assert update.params["flow_data[subscription_update][subscription]"] == "sub_p"
    # Going to Free is a cancellation at the period's end, set through Stripe's API: no portal page.
    assert to_free.status_code == 302 and to_free.url.endswith(reverse("billing:overview"))
    [cancel] = stripe_api.calls("POST", "/v1/subscriptions/sub_p")
    assert cancel.params["cancel_at_period_end"] == "true"
    assert Subscription.objects.get(provider_subscription_id="sub_p").cancel_at_period_end
    assert not stripe_api.calls("POST", "/v1/checkout/sessions")


def test_the_billing_page_opens_the_portal_for_a_stripe_customer(client, free_user, stripe_api):
    upgrade(client, free_user, "plus")

    response = client.post(reverse("billing:portal"))

    assert response.status_code == 302
    assert response.url.startswith("https://billing.stripe.com/p/session/")
    [call] = stripe_api.calls("POST", "/v1/billing_portal/sessions")
    assert call.params["customer"] == BillingCustomer.objects.get(user=free_user).provider_customer_id
    assert call.params["return_url"].endswith("/billing/")


@pytest.mark.parametrize(
    ("language", "stripe_locale"), [("fr", "fr"), ("pt-br", "pt-BR"), ("zh-hans", "zh"), ("ar", "auto")]
)
def test_checkout_and_the_portal_open_in_the_persons_language(client, free_user, stripe_api, language, stripe_locale):
    """Stripe's pages speak the language the product's pages spoke (Arabic, which Checkout lacks: the
    browser's, as Stripe reads it)."""
    User.objects.filter(pk=free_user.pk).update(language=language)
    upgrade(client, free_user, "plus")
    client.post(reverse("billing:portal"))

    [checkout] = stripe_api.calls("POST", "/v1/checkout/sessions")
    [portal] = stripe_api.calls("POST", "/v1/billing_portal/sessions")
    assert checkout.params["locale"] == portal.params["locale"] == stripe_locale


def test_checkout_follows_the_browsers_language_without_a_choice_of_ones_own(client, free_user, stripe_api):
    client.force_login(free_user)
    client.post(reverse("billing:choose_plan", args=["plus"]), headers={"Accept-Language": "de-DE,de;q=0.9"})
    [checkout] = stripe_api.calls("POST", "/v1/checkout/sessions")
    assert checkout.params["locale"] == "de"


def test_when_stripe_refuses_the_user_gets_503_with_a_message_and_nothing_changes(
    client, free_user, stripe_api, settings
):
    settings.STRIPE_PRICES = {**settings.STRIPE_PRICES, "plus": MISSING_PRICE}

    response = upgrade(client, free_user, "plus")

    assert response.status_code == 503
    assert int(response["Retry-After"]) == 60
    assert "Nothing was charged" in response.content.decode()
    assert effective_plan(free_user).slug == "free"


def test_a_plan_without_a_stripe_price_cannot_be_bought(client, free_user, stripe_api, settings):
    settings.STRIPE_PRICES = {"pro": PRICES["pro"]}

    response = upgrade(client, free_user, "plus")

    assert response.status_code == 403
    assert "no Stripe price is configured" in response.content.decode()
    assert not stripe_api.calls("POST", "/v1/checkout/sessions")

"""Deleting one's own account: password confirmation; conversations, API keys and shared links go;
the usage ledger stays for accounting, anonymised; a live subscription is cancelled first, at once
(with Stripe, at Stripe too, and a Stripe that does not answer leaves everything as it was).
"""

from __future__ import annotations

import time
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiKey
from accounts.services import delete_account
from billing.models import ProviderEvent, Subscription, UsageRecord
from chat.models import Conversation, Message, SharedConversation
from config.refusals import Busy, NotAllowed
from tests.billing.stripe_payloads import event, post_webhook, subscription
from tests.billing.stripe_standin import stripe_stood_in
from tests.conftest import PASSWORD, make_user
from tests.support.plans import put_on_plan

User = get_user_model()


def spend(user, tokens: int, *, conversation_id: int | None = None, api_key_id: int | None = None) -> UsageRecord:
    return UsageRecord.objects.create(
        user=user,
        reservation_id=uuid.uuid4().hex,
        generation_id=uuid.uuid4().hex,
        plan_slug="plus",
        model="sim-small",
        prompt_tokens=tokens,
        completion_tokens=0,
        billable_tokens=tokens,
        conversation_id=conversation_id,
        api_key_id=api_key_id,
    )


def with_history(user) -> Conversation:
    conversation = Conversation.objects.create(owner=user, title="Holiday plans", model="sim-small")
    Message.objects.create(conversation=conversation, role=Message.Role.USER, content="Where to in June?")
    SharedConversation.objects.create(conversation=conversation, token=uuid.uuid4().hex)
    key = ApiKey.objects.create(user=user, name="laptop", prefix="sk-sgl-abcd", hashed_key=uuid.uuid4().hex)
    spend(user, 1_200, conversation_id=conversation.pk)
    spend(user, 800, api_key_id=key.pk)
    return conversation


def test_delete_my_account_removes_what_is_personal_and_keeps_the_ledger_anonymised(client, user, other_user):
    put_on_plan(user, "plus")
    with_history(user)
    spend(other_user, 50)
    user_id = user.pk
    client.force_login(user)

    response = client.post(reverse("account_delete"), {"password": PASSWORD}, follow=True)

    assert response.redirect_chain[-1][0] == reverse("home")
    assert "Your account was deleted" in response.content.decode()
    assert not response.context["user"].is_authenticated
    assert not User.objects.filter(email=user.email).exists()
    assert not Conversation.objects.filter(owner_id=user_id).exists()
    assert not Message.objects.filter(conversation__owner_id=user_id).exists()
    assert not SharedConversation.objects.exists()
    assert not ApiKey.objects.filter(user_id=user_id).exists()
    assert not Subscription.objects.filter(user_id=user_id).exists()
    # The ledger keeps its figures for accounting, under one anonymous id and no user.
    kept = list(UsageRecord.objects.filter(user__isnull=True))
    assert sorted(row.billable_tokens for row in kept) == [800, 1_200]
    assert len({row.anonymous_id for row in kept}) == 1 and kept[0].anonymous_id.startswith("deleted-")
    assert kept[0].anonymous_id != f"deleted-{user_id}" and user.email not in kept[0].anonymous_id
    assert {(row.conversation_id, row.api_key_id) for row in kept} == {(None, None)}
    assert UsageRecord.objects.get(user=other_user).anonymous_id == ""
    # Signing in again is not possible.
    assert not client.login(email=user.email, password=PASSWORD)


def test_a_wrong_password_deletes_nothing_and_says_why(client, user):
    with_history(user)
    client.force_login(user)

    response = client.post(reverse("account_delete"), {"password": "not my password"})

    assert response.status_code == 403
    page = response.content.decode()
    assert "That password is not right. Your account was not deleted." in page
    assert 'id="delete-password"' in page
    assert User.objects.filter(pk=user.pk).exists()
    assert Conversation.objects.filter(owner=user).count() == 1
    assert UsageRecord.objects.filter(user=user).count() == 2


def test_the_your_data_page_offers_deletion_with_a_password(client, user):
    client.force_login(user)

    page = client.get(reverse("account_data")).content.decode()

    assert "Delete my account" in page
    assert f'action="{reverse("account_delete")}"' in page
    assert 'type="password"' in page and 'autocomplete="current-password"' in page


def test_deletion_needs_a_post(client, user):
    client.force_login(user)

    assert client.get(reverse("account_delete")).status_code == 405
    assert User.objects.filter(pk=user.pk).exists()


def test_an_active_dev_subscription_is_cancelled_before_the_account_goes(db, user, caplog):
    put_on_plan(user, "pro")
    sub, user_id = Subscription.objects.get(user=user), user.pk

    with caplog.at_level("INFO", logger="billing.services.subscriptions"):
        receipt = delete_account(user, password=PASSWORD)

    assert receipt.subscriptions_canceled == 1
    assert f"subscription {sub.pk} of user {user_id} canceled at once" in caplog.text


@pytest.fixture
def stripe_api(settings):
    with stripe_stood_in(settings) as standin:
        yield standin


def stripe_subscriber(user, standin, sub_id: str = "sub_d") -> Subscription:
    now = int(time.time())
    standin.subscriptions[sub_id] = subscription(
        sub_id, customer="cus_d", plan="plus", status="active", start=now - 86400, end=now + 29 * 86400, user_id=user.pk
    )
    put_on_plan(user, "plus")
    return Subscription.objects.filter(user=user).update(
        provider=Subscription.Provider.STRIPE,
        provider_subscription_id=sub_id,
        provider_customer_id="cus_d",
        current_period_start=timezone.now(),
    )


def test_a_stripe_subscription_is_cancelled_at_stripe_at_once(
    db, client, user, stripe_api, django_capture_on_commit_callbacks
):
    stripe_subscriber(user, stripe_api)

    user_id = user.pk

    receipt = delete_account(user, password=PASSWORD)

    assert stripe_api.calls("DELETE", "/v1/subscriptions/sub_d")
    assert receipt.subscriptions_canceled == 1
    assert not User.objects.filter(pk=user_id).exists()
    # Stripe's own customer.subscription.deleted arrives afterwards: recorded, nothing left to change.
    now = int(time.time())
    ended = subscription(
        "sub_d",
        customer="cus_d",
        plan="plus",
        status="canceled",
        start=now - 86400,
        end=now + 29 * 86400,
        user_id=user_id,
    ) | {"ended_at": now, "canceled_at": now}
    with django_capture_on_commit_callbacks(execute=True):
        response = post_webhook(client, event("evt_gone", "customer.subscription.deleted", now + 1, ended))
    assert response.status_code == 200
    stored = ProviderEvent.objects.get(event_id="evt_gone")
    assert stored.processed_at is not None and "was deleted" in stored.last_error


def test_when_stripe_does_not_answer_nothing_is_deleted(db, user, stripe_api):
    stripe_subscriber(user, stripe_api)
    stripe_api.subscriptions.clear()  # Stripe answers 404 for the subscription
    with_history(user)

    with pytest.raises(Busy):
        delete_account(user, password=PASSWORD)

    assert User.objects.filter(pk=user.pk).exists()
    assert Conversation.objects.filter(owner=user).count() == 1
    assert Subscription.objects.get(user=user).status == Subscription.Status.ACTIVE


def test_the_service_refuses_a_wrong_password(db, user):
    with pytest.raises(NotAllowed):
        delete_account(user, password="wrong")
    assert User.objects.filter(pk=user.pk).exists()


def test_another_users_data_is_untouched(db, user, other_user):
    with_history(other_user)
    make_user("third@example.com")

    delete_account(user, password=PASSWORD)

    assert Conversation.objects.filter(owner=other_user).count() == 1
    assert UsageRecord.objects.filter(user=other_user).count() == 2
    assert ApiKey.objects.filter(user=other_user).count() == 1


def test_password_guesses_are_limited_to_the_plans_rate(client, user):
    client.force_login(user)
    rate = 10  # Free's requests a minute

    answers = [client.post(reverse("account_delete"), {"password": f"guess {n}"}).status_code for n in range(rate + 1)]

    assert answers == [403] * rate + [429]
    refused = client.post(reverse("account_delete"), {"password": PASSWORD})
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert User.objects.filter(pk=user.pk).exists()

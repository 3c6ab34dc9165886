"""The moderation queue's actions beyond uphold and dismiss: uphold and hide the message, warn, suspend
for a period, ban. Each is enforced where the user is, and audited."""

from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiKey
from accounts.services import BanLiftRefused, end_expired_suspensions, reinstate_user
from audit.models import AuditEntry
from billing.models import Subscription
from chat.generation.assemble import assemble
from chat.models import Message
from chat.sharing.services import share_conversation
from moderation.models import AccountWarning, Flag
from review import services
from tests.billing.stripe_standin import stripe_stood_in
from tests.chat.factories import conversation_for, exchange
from tests.support.accounts import make_staff, signed_in
from tests.support.plans import put_on_plan

CHANGELIST = "admin:moderation_flag_changelist"
SECRET = "The recipe for the forbidden thing."


@pytest.fixture
def answer(user):
    conversation = conversation_for(user)
    _, greeting = exchange(conversation, "Hello there.", "Hello! How can I help?")
    _, answer = exchange(conversation, "Tell me the recipe.", SECRET, parent=greeting)
    return answer


@pytest.fixture
def report(user, answer):
    return Flag.objects.create(user=user, reporter=user, message=answer, source="user_report", reason="harmful")


def _act(client, action: str, flags, **fields):
    """An action from the queue's list: the page that asks first, then the answer to it."""
    ids = [f.pk for f in flags]
    asked = client.post(reverse(CHANGELIST), {"action": action, ACTION_CHECKBOX_NAME: ids})
    assert asked.status_code == 200 and 'data-testid="queue-action"' in asked.content.decode()
    return client.post(
        reverse(CHANGELIST), {"action": action, ACTION_CHECKBOX_NAME: ids, "apply": "1", **fields}, follow=True
    )


def test_upholding_and_hiding_takes_the_text_out_of_every_view_but_staffs(
    user, user_client, answer, report, moderator_client, moderator, client
):
    share, _ = share_conversation(user, answer.conversation_id, mode="live")
    done = _act(moderator_client, "hide", [report], text="Dangerous instructions.")
    assert "Hid 1 message." in done.content.decode()

    answer.refresh_from_db()
    report.refresh_from_db()
    assert (answer.status, answer.content) == ("blocked", "")
    assert answer.error == services.HIDDEN_NOTICE
    assert (report.state, report.reviewer, report.text) == ("upheld", moderator, SECRET)  # staff keep the text
    # The owner's chat, the download, the shared page and the next turn's context all go without it.
    conversation = user_client.get(reverse("chat:conversation", args=[answer.conversation_id])).content.decode()
    assert SECRET not in conversation and services.HIDDEN_NOTICE in conversation
    export = user_client.get(reverse("chat:conversation-export", args=[answer.conversation_id]), {"format": "md"})
    assert SECRET not in export.content.decode()
    shared = client.get(reverse("shared-conversation", args=[share.token])).content.decode()
    assert SECRET not in shared and "Hello! How can I help?" in shared
    history = list(answer.conversation.messages.order_by("created", "pk"))
    assert SECRET not in str(assemble("", "", history, "Next question", 10_000).messages)
    # And staff still read it on the flag.
    assert SECRET in moderator_client.get(reverse("admin:moderation_flag_change", args=[report.pk])).content.decode()

    hidden = AuditEntry.objects.get(action="message.hide")
    assert (hidden.actor, hidden.target_id, hidden.reason) == (moderator, str(answer.pk), "Dangerous instructions.")
    assert hidden.details["status_before"] == "completed" and hidden.details["flag_id"] == report.pk
    assert AuditEntry.objects.filter(action="flag.uphold", target_id=str(report.pk), actor=moderator).exists()


def test_a_user_message_can_be_hidden_too_and_says_so_in_its_place(user, user_client, answer, moderator):
    question = answer.parent
    flag = Flag.objects.create(user=user, message=question, source="input", category="Spam", text=question.content)
    services.hide_message(flag, moderator)
    question.refresh_from_db()
    assert (question.status, question.content) == ("blocked", "")
    body = user_client.get(reverse("chat:conversation", args=[answer.conversation_id])).json()
    shown = {m["id"]: m for m in body["messages"]}
    assert shown[question.pk]["content"] == "" and shown[question.pk]["error"] == services.HIDDEN_NOTICE


def test_an_answer_still_being_written_or_already_deleted_cannot_be_hidden(user, answer, report, moderator):
    Message.objects.filter(pk=answer.pk).update(status="streaming")
    with pytest.raises(services.NotHidable, match="still being written"):
        services.hide_message(report, moderator)
    report.refresh_from_db()
    assert report.state == "open" and not AuditEntry.objects.filter(action="message.hide").exists()
    answer.delete()
    report.refresh_from_db()
    with pytest.raises(services.NotHidable, match="deleted"):
        services.hide_message(report, moderator)


def test_a_warning_waits_on_the_users_chat_page_until_read_and_is_emailed(
    user, user_client, report, moderator_client, moderator, django_capture_on_commit_callbacks
):
    text = "Reporting answers to get them removed is fine; insulting people is not."
    with django_capture_on_commit_callbacks(execute=True):
        done = _act(moderator_client, "warn", [report], text=text)
    assert "Warned 1 user." in done.content.decode()

    warning = AccountWarning.objects.get()
    assert (warning.user, warning.issued_by, warning.flag, warning.text) == (user, moderator, report, text)
    report.refresh_from_db()
    assert report.state == "upheld"
    assert len(mail.outbox) == 1 and mail.outbox[0].to == [user.email] and text in mail.outbox[0].body
    entry = AuditEntry.objects.get(action="user.warn")
    assert (entry.actor, entry.target_id, entry.reason, entry.details) == (
        moderator,
        str(user.pk),
        text,
        {"flags": [report.pk]},
    )

    page = user_client.get(reverse("home")).content.decode()
    assert 'data-testid="moderation-warning"' in page and text in page
    seen = user_client.post(reverse("account_warning_seen", args=[warning.pk]), {"next": "/"})
    assert seen.status_code == 302 and seen["Location"] == "/"
    assert 'data-testid="moderation-warning"' not in user_client.get(reverse("home")).content.decode()
    warning.refresh_from_db()
    assert warning.seen_at is not None


def test_a_warning_needs_its_text_and_another_users_warning_is_not_found(
    user, other_user, report, moderator_client, moderator, client
):
    refused = _act(moderator_client, "warn", [report], text="   ")
    assert "Write the text first" in refused.content.decode() and not AccountWarning.objects.exists()
    warning = services.warn_user(user, "Keep it civil.", reviewer=moderator, flags=[report])
    client.force_login(other_user)
    assert client.post(reverse("account_warning_seen", args=[warning.pk])).status_code == 404
    warning.refresh_from_db()
    assert warning.seen_at is None


def test_a_suspension_for_a_period_says_until_when_and_ends_by_itself(
    user, user_client, report, moderator_client, moderator
):
    done = _act(moderator_client, "suspend", [report], text="Harassing other users", days="3")
    assert "Suspended 1 user." in done.content.decode()
    user.refresh_from_db()
    assert user.is_suspended and user.suspended_until is not None
    assert timedelta(days=3) - timedelta(minutes=1) < user.suspended_until - user.suspended_at <= timedelta(days=3)
    refused = user_client.get(reverse("chat:conversations"))
    assert refused.status_code == 403
    sentence = refused.json()["error"]["message"]
    assert "suspended by our staff until" in sentence and "Harassing other users" in sentence
    entry = AuditEntry.objects.get(action="user.suspend")
    assert entry.actor == moderator and entry.details["flags"] == [report.pk] and "until" in entry.details

    assert end_expired_suspensions() == []  # not yet
    assert end_expired_suspensions(now=user.suspended_until + timedelta(seconds=1)) == [user.pk]
    user.refresh_from_db()
    assert not user.is_suspended and user.suspended_until is None
    lifted = AuditEntry.objects.get(action="user.reinstate")
    assert lifted.actor is None and "period ended" in lifted.reason
    # Reinstatement ends the sessions from before it: they sign in again.
    assert user_client.get(reverse("chat:conversations")).status_code in (302, 401, 403)


def test_a_suspension_lifted_or_changed_by_staff_is_not_ended_by_the_clock(user, moderator):
    services.suspend_for_flags(user, "Spam", reviewer=moderator, flags=[], days=1)
    user.refresh_from_db()
    later = user.suspended_until + timedelta(seconds=1)
    # Staff change it to an open-ended suspension meanwhile: the period no longer applies.
    services.accounts.suspend_user(user, "Spam, again", actor=moderator)
    assert end_expired_suspensions(now=later) == []
    user.refresh_from_db()
    assert user.is_suspended


def test_the_suspension_page_refuses_a_period_it_does_not_offer(user, report, moderator_client):
    refused = _act(moderator_client, "suspend", [report], text="Spam", days="365")
    assert "Choose how long" in refused.content.decode()
    user.refresh_from_db()
    assert not user.is_suspended


def test_a_ban_revokes_keys_and_only_a_superuser_lifts_it(user, report, moderator_client, moderator, superuser):
    key = ApiKey.objects.create(user=user, name="script", prefix="sk-test", hashed_key="0" * 64)
    done = _act(moderator_client, "ban", [report], text="Selling stolen accounts")
    assert "Banned 1 user." in done.content.decode()
    user.refresh_from_db()
    assert user.is_suspended and user.banned_at is not None and user.suspended_until is None
    key.refresh_from_db()
    assert key.revoked_at is not None
    ban = AuditEntry.objects.get(action="user.ban")
    assert ban.actor == moderator and ban.details["api_keys_revoked"] == 1 and ban.details["flags"] == [report.pk]
    report.refresh_from_db()
    assert report.state == "upheld"

    # The clock never lifts a ban, a moderator cannot, a superuser can.
    assert end_expired_suspensions(now=timezone.now() + timedelta(days=3650)) == []
    with pytest.raises(BanLiftRefused):
        reinstate_user(user, actor=moderator, reason="Sorry")
    refused = moderator_client.post(
        reverse("admin:accounts_user_reinstate", args=[user.pk]), {"reason": "Sorry", "apply": "1"}, follow=True
    )
    assert "Only a superuser can lift a ban." in refused.content.decode()
    user.refresh_from_db()
    assert user.is_suspended
    reinstate_user(user, actor=superuser, reason="Appeal accepted")
    user.refresh_from_db()
    assert not user.is_suspended and user.banned_at is None
    assert AuditEntry.objects.get(action="user.reinstate").details == {"ban_lifted": True}


def test_the_banned_users_sentence_says_banned(user, user_client, moderator):
    services.ban_for_flags(user, "Fraud", reviewer=moderator, flags=[])
    sentence = user_client.get(reverse("chat:conversations")).json()["error"]["message"]
    assert sentence.startswith("Your account has been banned by our staff.") and "Fraud" in sentence


def test_a_flags_page_offers_the_actions_its_reader_may_take(report, moderator_client, db):
    page = moderator_client.get(reverse("admin:moderation_flag_change", args=[report.pk])).content.decode()
    for action in ("hide", "warn", "suspend", "ban"):
        assert reverse("admin:moderation_flag_act", args=[report.pk, action]) in page
    one = moderator_client.post(
        reverse("admin:moderation_flag_act", args=[report.pk, "warn"]), {"text": "Careful.", "apply": "1"}
    )
    assert one.status_code == 302 and one["Location"] == reverse("admin:moderation_flag_change", args=[report.pk])
    assert AccountWarning.objects.filter(text="Careful.").exists()


def test_staff_without_the_right_permissions_cannot_act(report, user, db):
    helper = make_staff("helper@example.com")  # staff, but in no group: no moderation permission
    client = signed_in(helper)
    for action in ("hide", "warn", "suspend", "ban"):
        response = client.post(
            reverse("admin:moderation_flag_act", args=[report.pk, action]), {"text": "x", "apply": "1"}
        )
        assert response.status_code == 403
    user.refresh_from_db()
    assert not user.is_suspended and not AccountWarning.objects.exists()


def test_people_who_are_not_staff_cannot_act(report, user_client):
    response = user_client.post(reverse("admin:moderation_flag_act", args=[report.pk, "ban"]), {"text": "x"})
    assert response.status_code in (302, 403)
    assert not AuditEntry.objects.filter(action="user.ban").exists()


def test_a_ban_cancels_a_paid_subscription_at_once(user, moderator):
    put_on_plan(user, "pro")
    services.ban_for_flags(user, "Card fraud", reviewer=moderator, flags=[])
    assert Subscription.objects.get(user=user).status == Subscription.Status.CANCELED
    assert AuditEntry.objects.get(action="user.ban").details["subscriptions_canceled"] == 1


def test_when_stripe_does_not_answer_a_ban_changes_nothing_and_staff_are_told(user, report, moderator_client, settings):
    with stripe_stood_in(settings):
        put_on_plan(user, "plus")
        Subscription.objects.filter(user=user).update(
            provider=Subscription.Provider.STRIPE, provider_subscription_id="sub_gone", provider_customer_id="cus_x"
        )  # the stand-in knows no such subscription: Stripe answers 404
        done = _act(moderator_client, "ban", [report], text="Card fraud")
    assert "Banned" not in done.content.decode() and "errornote" not in done.content.decode()
    assert done.status_code == 200 and b"messagelist" in done.content
    user.refresh_from_db()
    report.refresh_from_db()
    assert not user.is_suspended and user.banned_at is None and report.state == "open"
    assert Subscription.objects.get(user=user).status == Subscription.Status.ACTIVE
    assert not AuditEntry.objects.filter(action__in=["user.ban", "user.suspend"]).exists()

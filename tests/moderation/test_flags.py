"""Flags: users report answers, staff uphold or dismiss them, and repeated upheld flags suspend."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from audit.models import AuditEntry
from moderation.models import Flag
from review import services
from tests.chat.factories import conversation_for, exchange, say


@pytest.fixture
def answer(user):
    _, answer = exchange(conversation_for(user), "Where is the lighthouse?", "On the northern cape.")
    return answer


def test_a_user_reports_an_answer_once_with_a_reason(user_client, answer, user):
    url = reverse("chat:message-report", args=[answer.pk])
    first = user_client.post(url, {"reason": "  It made that up.  "}, content_type="application/json")
    assert first.status_code == 201
    again = user_client.post(url, {"reason": "twice"}, content_type="application/json")
    assert again.status_code == 200 and again.json()["report"]["id"] == first.json()["report"]["id"]
    flag = Flag.objects.get()
    assert (flag.source, flag.state, flag.message, flag.reporter, flag.user) == (
        "user_report",
        "open",
        answer,
        user,
        user,
    )
    assert flag.reason == "It made that up." and flag.text == "On the northern cape."


def test_what_cannot_be_reported_is_refused_with_a_reason(user_client, answer, other_user, client):
    question = answer.parent
    refused = user_client.post(reverse("chat:message-report", args=[question.pk]), {}, content_type="application/json")
    assert refused.status_code == 400 and "Only answers" in refused.json()["error"]["message"]
    running = say(answer.conversation, "assistant", "", parent=question, status="streaming")
    busy = user_client.post(reverse("chat:message-report", args=[running.pk]), {}, content_type="application/json")
    assert busy.status_code == 409 and "still being written" in busy.json()["error"]["message"]
    too_long = user_client.post(
        reverse("chat:message-report", args=[answer.pk]), {"reason": "x" * 1001}, content_type="application/json"
    )
    assert too_long.status_code == 400
    client.force_login(other_user)
    assert (
        client.post(reverse("chat:message-report", args=[answer.pk]), {}, content_type="application/json").status_code
        == 404
    )
    assert not Flag.objects.exists()


def test_upholding_the_nth_flag_suspends_the_user_through_the_accounts_service(settings, user, staff, answer):
    settings.MODERATION_SUSPEND_AFTER_UPHELD = 2
    first, second = (
        Flag.objects.create(user=user, source="input", category="Spam", blocked=True, text="buy") for _ in range(2)
    )
    report = Flag.objects.create(user=user, reporter=user, message=answer, source="user_report")
    services.review_flag(report, staff, Flag.State.UPHELD)  # a user's own report never counts against them
    services.review_flag(first, staff, Flag.State.UPHELD, "Obvious spam.")
    user.refresh_from_db()
    assert not user.is_suspended
    services.review_flag(second, staff, Flag.State.UPHELD)
    user.refresh_from_db()
    assert user.is_suspended and user.suspended_at is not None and "content policy" in user.suspended_reason
    first.refresh_from_db()
    assert (first.state, first.reviewer, first.notes) == ("upheld", staff, "Obvious spam.") and first.reviewed_at


def test_no_automatic_suspension_when_the_threshold_is_zero(settings, user, staff):
    settings.MODERATION_SUSPEND_AFTER_UPHELD = 0
    for _ in range(5):
        services.review_flag(Flag.objects.create(user=user, source="output", blocked=True), staff, Flag.State.UPHELD)
    user.refresh_from_db()
    assert not user.is_suspended


def test_staff_list_open_flags_first_and_dismiss_or_uphold_them(staff_client, settings, user, staff, answer):
    settings.MODERATION_SUSPEND_AFTER_UPHELD = 1
    old = Flag.objects.create(
        user=user, source="output", category="Handshakes", blocked=True, text="cut text", state="dismissed"
    )
    spam = Flag.objects.create(user=user, source="input", category="Spam", blocked=True, text="buy followers")
    report = Flag.objects.create(user=user, reporter=user, message=answer, source="user_report", reason="wrong")
    changelist = reverse("admin:moderation_flag_changelist")
    listing = staff_client.get(changelist)
    body = listing.content.decode()
    assert listing.status_code == 200
    assert body.index("buy followers") < body.index("cut text")  # open before reviewed
    assert "cut text" not in staff_client.get(changelist, {"state__exact": "open"}).content.decode()

    staff_client.post(changelist, {"action": "dismiss", ACTION_CHECKBOX_NAME: [report.pk]})
    response = staff_client.post(changelist, {"action": "uphold", ACTION_CHECKBOX_NAME: [spam.pk]}, follow=True)
    assert "Suspended: ada@example.com" in response.content.decode()
    report.refresh_from_db(), spam.refresh_from_db(), user.refresh_from_db()
    assert (report.state, report.reviewer) == ("dismissed", staff)
    assert (spam.state, spam.reviewer) == ("upheld", staff) and user.is_suspended
    assert old.state == "dismissed"
    detail = staff_client.get(reverse("admin:moderation_flag_change", args=[report.pk])).content.decode()
    assert f"#{answer.pk} in conversation #{answer.conversation_id}" in detail


def test_people_who_are_not_staff_do_not_reach_the_flags(user_client):
    assert user_client.get(reverse("admin:moderation_flag_changelist")).status_code in (302, 403)


def test_a_flags_page_shows_the_conversation_around_it_and_opening_it_is_audited(staff_client, staff, user):
    conversation = conversation_for(user)
    exchange(conversation, "What is the tallest lighthouse?", "The Jeddah Light.")
    _, answer = exchange(conversation, "And the oldest?", "The Tower of Hercules.")
    exchange(conversation, "Thanks, that is all.", "You are welcome.")
    flag = Flag.objects.create(user=user, reporter=user, message=answer, source="user_report", reason="wrong")

    page = staff_client.get(reverse("admin:moderation_flag_change", args=[flag.pk])).content.decode()
    assert all(
        text in page
        for text in (
            "What is the tallest lighthouse?",
            "And the oldest?",
            "The Tower of Hercules.",
            "Thanks, that is all.",
        )
    )
    assert "You are welcome." not in page  # one turn after the flagged message, no more
    entry = AuditEntry.objects.get(action="flag.view")
    assert (entry.actor, entry.target_id, entry.details) == (staff, str(flag.pk), {"message_id": answer.pk})


# --- deleting flags: superusers only, each deletion audited --------------------------------------------------------


def blocked_flag(user, text: str = "the only copy of what was blocked") -> Flag:
    return Flag.objects.create(user=user, source=Flag.Source.INPUT, category="Spam", blocked=True, text=text)


def test_a_moderator_cannot_delete_a_flag_from_its_page_the_list_or_a_service(moderator_client, moderator, user):
    flag = blocked_flag(user)
    delete = reverse("admin:moderation_flag_delete", args=[flag.pk])
    changelist = reverse("admin:moderation_flag_changelist")

    assert moderator_client.get(delete).status_code == 403
    assert moderator_client.post(delete, {"post": "yes"}).status_code == 403
    assert 'value="delete_selected"' not in moderator_client.get(changelist).content.decode()
    moderator_client.post(changelist, {"action": "delete_selected", ACTION_CHECKBOX_NAME: [flag.pk], "post": "yes"})
    with pytest.raises(services.FlagDeletionRefused, match="Only a superuser"):
        services.delete_flags(moderator, [flag])

    assert Flag.objects.filter(pk=flag.pk, text="the only copy of what was blocked").exists()
    assert not AuditEntry.objects.filter(action="flag.delete").exists()


def test_a_superuser_deletes_flags_and_each_deletion_is_audited_with_whom_it_concerned(superuser, user, other_user):
    from tests.support.accounts import signed_in

    client = signed_in(superuser)
    one, two, three = blocked_flag(user), blocked_flag(other_user), blocked_flag(other_user)

    page = client.post(reverse("admin:moderation_flag_delete", args=[one.pk]), {"post": "yes"})
    assert page.status_code == 302
    client.post(
        reverse("admin:moderation_flag_changelist"),
        {"action": "delete_selected", ACTION_CHECKBOX_NAME: [two.pk, three.pk], "post": "yes"},
    )

    assert not Flag.objects.exists()
    entries = sorted(AuditEntry.objects.filter(action="flag.delete"), key=lambda e: e.details["flag_id"])
    assert [
        (e.actor, e.target_id, e.details["flag_id"], e.details["user_id"], e.details["user_email"]) for e in entries
    ] == [
        (superuser, str(one.pk), one.pk, user.pk, user.email),
        (superuser, str(two.pk), two.pk, other_user.pk, other_user.email),
        (superuser, str(three.pk), three.pk, other_user.pk, other_user.email),
    ]
    assert all("the only copy" not in str(e.details) for e in entries)  # the deleted text is not kept here either

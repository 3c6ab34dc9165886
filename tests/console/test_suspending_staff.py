"""Only a superuser suspends or bans staff. A moderator who tries, from any page that ends in
accounts.services (the users list, a user's Suspend… button, the moderation queue's suspend for a
period and ban), is refused with a sentence, nothing changes, and the attempt is in the audit log."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Group
from django.urls import reverse

from accounts import services
from accounts.models import ApiKey
from audit.models import AuditEntry
from console.roles import MODERATOR_GROUP
from moderation.models import Flag
from review import services as moderation
from tests.conftest import make_user
from tests.support.accounts import make_staff, signed_in

REFUSED = "Only a superuser can suspend or ban staff"


def page_text(response) -> str:
    return response.content.decode()


def refusals(action: str = "user.suspend.refused"):
    return AuditEntry.objects.filter(action=action)


@pytest.fixture
def other_moderator(db):
    staff = make_staff("second-mod@example.com")
    staff.groups.add(Group.objects.get(name=MODERATOR_GROUP))
    return staff


def flag_on(user) -> Flag:
    return Flag.objects.create(user=user, source=Flag.Source.INPUT, category="Spam", blocked=True, text="buy now")


def queue_action(client, action: str, flags, **fields):
    """The moderation queue's action on the selected flags: the page asking first, then the answer."""
    changelist = reverse("admin:moderation_flag_changelist")
    ids = [flag.pk for flag in flags]
    client.post(changelist, {"action": action, ACTION_CHECKBOX_NAME: ids})
    return client.post(changelist, {"action": action, ACTION_CHECKBOX_NAME: ids, "apply": "1", **fields}, follow=True)


def assert_untouched(*people) -> None:
    for person in people:
        person.refresh_from_db()
        assert not person.is_suspended and person.banned_at is None, person.email


def test_a_moderator_cannot_suspend_a_superuser_from_the_users_list(moderator_client, moderator, superuser):
    ada = make_user("ada@example.com")

    done = moderator_client.post(
        reverse("admin:accounts_user_changelist"),
        {"action": "suspend", ACTION_CHECKBOX_NAME: [ada.pk, superuser.pk], "apply": "1", "reason": "Lock them out"},
        follow=True,
    )

    assert REFUSED in page_text(done) and superuser.email in page_text(done)
    assert_untouched(superuser, ada)  # all or none: the selection is refused as a whole
    entry = refusals().get()
    assert (entry.actor, entry.target_id, entry.target_repr, entry.reason) == (
        moderator,
        str(superuser.pk),
        superuser.email,
        "Lock them out",
    )
    assert not AuditEntry.objects.filter(action="user.suspend").exists()


def test_a_moderator_cannot_suspend_a_superuser_from_their_page(moderator_client, moderator, superuser):
    page = page_text(moderator_client.get(reverse("admin:accounts_user_change", args=[superuser.pk])))
    assert reverse("admin:accounts_user_suspend", args=[superuser.pk]) not in page  # no button to press

    done = moderator_client.post(
        reverse("admin:accounts_user_suspend", args=[superuser.pk]), {"apply": "1", "reason": "Lock out"}, follow=True
    )

    assert done.status_code == 200 and REFUSED in page_text(done)
    assert_untouched(superuser)
    assert refusals().get().actor == moderator


def test_a_moderator_cannot_suspend_another_moderator_for_a_period_from_the_queue(
    moderator_client, moderator, other_moderator
):
    flag = flag_on(other_moderator)

    done = queue_action(moderator_client, "suspend", [flag], text="Spam", days="7")

    assert REFUSED in page_text(done) and "Suspended" not in page_text(done)
    assert_untouched(other_moderator)
    flag.refresh_from_db()
    assert flag.state == Flag.State.OPEN  # nothing of the action happened
    entry = refusals().get()
    assert (entry.actor, entry.target_id, entry.reason) == (moderator, str(other_moderator.pk), "Spam")
    assert entry.details["flags"] == [flag.pk] and entry.details["days"] == 7


def test_a_moderator_cannot_ban_a_superuser_from_the_queue(moderator_client, moderator, superuser):
    key = ApiKey.objects.create(user=superuser, name="ops", prefix="sk-ops", hashed_key="1" * 64)
    flag = flag_on(superuser)
    page = page_text(moderator_client.get(reverse("admin:moderation_flag_change", args=[flag.pk])))
    assert reverse("admin:moderation_flag_act", args=[flag.pk, "warn"]) in page
    for action in ("suspend", "ban"):  # no button to press
        assert reverse("admin:moderation_flag_act", args=[flag.pk, action]) not in page

    done = queue_action(moderator_client, "ban", [flag], text="Gone")

    assert REFUSED in page_text(done) and "Banned" not in page_text(done)
    assert_untouched(superuser)
    key.refresh_from_db()
    assert key.revoked_at is None
    entry = refusals("user.ban.refused").get()
    assert (entry.actor, entry.target_id, entry.reason, entry.details["flags"]) == (
        moderator,
        str(superuser.pk),
        "Gone",
        [flag.pk],
    )


def test_the_services_refuse_it_whoever_calls_them(moderator, superuser):
    with pytest.raises(services.SuspensionRefused, match=REFUSED):
        services.suspend_user(superuser, "Lock out", actor=moderator)
    with pytest.raises(services.SuspensionRefused, match=REFUSED):
        services.ban_user(superuser, "Lock out", actor=moderator)
    with pytest.raises(services.SuspensionRefused, match=REFUSED):
        moderation.suspend_for_flags(superuser, "Lock out", reviewer=moderator, flags=[], days=1)
    assert_untouched(superuser)
    assert refusals().count() == 2 and refusals("user.ban.refused").count() == 1


def test_a_superuser_suspends_and_bans_staff(admin_client, superuser, moderator, other_moderator):
    admin_client.post(
        reverse("admin:accounts_user_changelist"),
        {"action": "suspend", ACTION_CHECKBOX_NAME: [moderator.pk], "apply": "1", "reason": "Left the team"},
    )
    moderator.refresh_from_db()
    assert moderator.is_suspended

    queue_action(admin_client, "ban", [flag_on(other_moderator)], text="Abused the console")
    other_moderator.refresh_from_db()
    assert other_moderator.banned_at is not None
    assert not AuditEntry.objects.filter(action__endswith=".refused").exists()


def test_the_automatic_suspension_never_suspends_staff(settings, moderator, superuser):
    settings.MODERATION_SUSPEND_AFTER_UPHELD = 2
    for _ in range(2):
        moderation.review_flag(flag_on(superuser), moderator, Flag.State.UPHELD)

    assert_untouched(superuser)
    entry = refusals().get()
    assert entry.actor is None and entry.target_id == str(superuser.pk)
    assert entry.details["rule"] == "MODERATION_SUSPEND_AFTER_UPHELD"


def test_staff_who_are_not_moderators_still_cannot_suspend_anyone(db, superuser):
    client = signed_in(make_staff("newbie@example.com"))
    response = client.post(reverse("admin:accounts_user_suspend", args=[superuser.pk]), {"apply": "1", "reason": "x"})
    assert response.status_code == 403
    assert_untouched(superuser)

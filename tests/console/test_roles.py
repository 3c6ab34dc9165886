"""The moderator role: works moderation and reads users and conversations (with a reason); cannot
change plans, billing or users' accounts."""

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Group
from django.urls import reverse

from audit.models import AuditEntry
from billing.models import Plan
from console.roles import MODERATOR_GROUP
from tests.conftest import make_user

from .test_audit import plan_form


def test_the_moderator_group_exists_with_its_permissions(db):
    granted = {
        f"{p.content_type.app_label}.{p.codename}"
        for p in Group.objects.get(name=MODERATOR_GROUP).permissions.select_related("content_type")
    }
    assert {
        "accounts.view_user",
        "accounts.suspend_user",
        "chat.view_conversation",
        "audit.view_auditentry",
    } <= granted
    assert not {p for p in granted if p.startswith(("billing.", "inference."))}
    assert "accounts.change_user" not in granted


def test_a_moderator_can_view_users_and_their_usage(moderator_client):
    make_user("ada@example.com")

    response = moderator_client.get(reverse("admin:accounts_user_changelist"))

    assert response.status_code == 200
    assert "ada@example.com" in response.content.decode()


def test_a_moderator_cannot_edit_plans(moderator_client):
    plan = Plan.objects.get(slug="pro")
    change = reverse("admin:billing_plan_change", args=[plan.pk])

    assert moderator_client.get(change).status_code == 403
    assert moderator_client.post(change, plan_form(plan, requests_per_minute=99)).status_code == 403
    assert moderator_client.get(reverse("admin:billing_plan_changelist")).status_code == 403
    assert moderator_client.get(reverse("admin:billing_subscription_changelist")).status_code == 403
    plan.refresh_from_db()
    assert plan.requests_per_minute != 99


def test_a_moderator_cannot_edit_a_users_account(moderator_client):
    ada = make_user("ada@example.com")

    response = moderator_client.post(
        reverse("admin:accounts_user_change", args=[ada.pk]),
        {"email": ada.email, "is_staff": "on", "is_superuser": "on"},
    )

    assert response.status_code == 403
    ada.refresh_from_db()
    assert not ada.is_staff and not ada.is_superuser


def test_a_moderator_can_suspend_with_a_reason_and_it_is_audited(moderator_client, moderator):
    ada = make_user("ada@example.com")

    moderator_client.post(
        reverse("admin:accounts_user_changelist"),
        {"action": "suspend", ACTION_CHECKBOX_NAME: [ada.pk], "apply": "1", "reason": "Harassment report #9"},
    )

    ada.refresh_from_db()
    assert ada.is_suspended
    assert AuditEntry.objects.filter(actor=moderator, action="user.suspend", target_id=str(ada.pk)).exists()


def test_staff_without_a_role_cannot_suspend(db):
    from tests.support.accounts import make_staff, signed_in

    client = signed_in(make_staff("newbie@example.com"))
    ada = make_user("ada@example.com")

    assert client.get(reverse("admin:accounts_user_suspend", args=[ada.pk])).status_code == 403
    ada.refresh_from_db()
    assert not ada.is_suspended


def test_the_sidebar_groups_what_a_moderator_may_see(moderator_client):
    page = moderator_client.get(reverse("admin:accounts_user_changelist")).content.decode()

    assert "People" in page and "Chat" in page and "Audit" in page
    assert reverse("admin:billing_plan_changelist") not in page

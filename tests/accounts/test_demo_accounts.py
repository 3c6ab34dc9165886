"""The accounts `make run` prints: the demo user can try every feature, the API included."""

import pytest
from django.core.management import call_command

from accounts.api_keys import authenticate_api_key
from accounts.models import User
from billing.models import Plan, Subscription
from billing.seed import seed_plans
from billing.services import effective_plan

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _plans():
    seed_plans(Plan)


def test_the_demo_user_is_on_plus_through_development_payments_and_can_make_an_api_key(capsys):
    call_command("seed_demo_users")
    printed = capsys.readouterr().out

    demo = User.objects.get(email="demo@example.com")
    assert effective_plan(demo).slug == "plus"
    assert demo.subscriptions.get().provider == Subscription.Provider.DEV
    assert "demo@example.com / demo-password-123" in printed and "Plus" in printed
    call_command("create_api_key", "demo@example.com", "--name", "try it")
    assert authenticate_api_key(capsys.readouterr().out.strip()).user == demo


def test_seeding_again_keeps_one_subscription_and_the_plan_a_demo_user_chose(capsys):
    call_command("seed_demo_users")
    call_command("seed_demo_users")
    demo = User.objects.get(email="demo@example.com")
    assert effective_plan(demo).slug == "plus"
    assert demo.subscriptions.count() == 1

    # Upgraded to Pro on the Plans page: the next `make run` leaves that alone.
    demo.subscriptions.update(plan=Plan.objects.get(slug="pro"))
    call_command("seed_demo_users")
    assert effective_plan(demo).slug == "pro"
    assert "Pro" in capsys.readouterr().out


def test_with_stripe_as_the_provider_the_demo_user_stays_on_free_and_is_told_how_to_upgrade(settings, capsys):
    settings.PAYMENT_PROVIDER = "stripe"  # nothing may be charged or faked: no dev subscription is made

    call_command("seed_demo_users")

    demo = User.objects.get(email="demo@example.com")
    assert effective_plan(demo).slug == "free"
    assert not demo.subscriptions.exists()
    assert "Plans page" in capsys.readouterr().out


def test_seeding_again_never_resets_a_changed_password_nor_signs_anyone_out(client, capsys):
    # `make run` once: both accounts are created with the published passwords, printed once.
    call_command("seed_demo_users")
    first = capsys.readouterr().out
    assert "demo@example.com / demo-password-123" in first and "staff@example.com / staff-password-123" in first

    # Their owners choose passwords of their own, and the demo user is signed in somewhere.
    demo, staff = User.objects.get(email="demo@example.com"), User.objects.get(email="staff@example.com")
    for user in (demo, staff):
        user.set_password(f"{user.display_name}-chose-this-one-42")
        user.save()
    client.force_login(demo)
    signed_in = client.session.session_key

    # The next `make run` leaves them alone, prints no password, and says the accounts exist.
    call_command("seed_demo_users")
    again = capsys.readouterr().out

    for user in (demo, staff):
        user.refresh_from_db()
        assert user.check_password(f"{user.display_name}-chose-this-one-42"), user.email
    assert "password" not in again.replace("password unchanged", "")
    assert "demo-password-123" not in again and "staff-password-123" not in again
    assert "demo@example.com" in again and "staff@example.com" in again and "already exist" in again
    # The session is still signed in (a password reset would have ended it).
    assert client.get("/settings/").status_code == 200
    assert client.session.session_key == signed_in and int(client.session["_auth_user_id"]) == demo.pk


def test_an_existing_account_keeps_what_its_owner_or_staff_changed_but_the_demo_user_is_put_back_on_plus(capsys):
    call_command("seed_demo_users")
    demo, staff = User.objects.get(email="demo@example.com"), User.objects.get(email="staff@example.com")
    staff.is_superuser = False  # an administrator narrowed the staff account
    staff.display_name = "Operations"
    staff.save()
    demo.subscriptions.update(status=Subscription.Status.CANCELED)  # the demo user moved to Free
    assert effective_plan(demo).slug == "free"
    capsys.readouterr()

    call_command("seed_demo_users")

    staff.refresh_from_db()
    assert (staff.is_staff, staff.is_superuser, staff.display_name) == (True, False, "Operations")
    assert effective_plan(demo).slug == "plus"
    assert "on the Plus plan" in capsys.readouterr().out

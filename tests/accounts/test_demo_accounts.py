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

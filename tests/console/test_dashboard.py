"""The staff dashboard: today's figures from the database and the ledger, as a page and as JSON."""

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from billing.models import Plan, Subscription
from chat.models import Conversation, Message
from tests.conftest import make_user

from .conftest import signed_in, usage


def test_the_dashboard_json_is_for_staff_only(client, admin_client, moderator_client, db):
    url = reverse("admin:console-dashboard-data")

    assert client.get(url).status_code == 302
    assert signed_in(make_user("member@example.com")).get(url).status_code == 302
    assert admin_client.get(url).status_code == 200
    assert moderator_client.get(url).status_code == 200


def test_the_dashboard_counts_todays_activity(admin_client):
    now = timezone.now()
    ada = make_user("ada@example.com")
    make_user("grace@example.com", is_suspended=True, suspended_reason="Spam")
    Subscription.objects.create(user=ada, plan=Plan.objects.get(slug="pro"), status=Subscription.Status.ACTIVE,
                                provider="stripe", provider_subscription_id="sub_1",
                                current_period_start=now - timedelta(days=3),
                                current_period_end=now + timedelta(days=27))
    conversation = Conversation.objects.create(owner=ada, model="demo")
    question = Message.objects.create(conversation=conversation, role=Message.Role.USER, content="hi")
    Message.objects.create(conversation=conversation, role=Message.Role.ASSISTANT, parent=question, content="hello")
    Message.objects.create(conversation=conversation, role=Message.Role.ASSISTANT, parent=question,
                           status=Message.Status.BLOCKED)
    old = Message.objects.create(conversation=conversation, role=Message.Role.USER, content="yesterday")
    Message.objects.filter(pk=old.pk).update(created=now - timedelta(hours=30))
    usage(ada, 120, prompt=100, completion=20, plan_slug="pro")

    data = admin_client.get(reverse("admin:console-dashboard-data")).json()

    assert data["users"] == {"total": 3, "joined_today": 3, "suspended": 1}  # with the superuser
    assert {"plan": "Pro", "users": 1} in data["plans"]
    assert {"plan": "Free (no subscription)", "users": 2} in data["plans"]
    assert data["messages"]["questions_hour"] == 1 and data["messages"]["questions_day"] == 1
    assert data["messages"]["answers_hour"] == 2 and data["messages"]["blocked_day"] == 1
    assert data["tokens_today"] == {"billable": 120, "prompt": 100, "completion": 20}
    assert sum(data["last_hour"]["questions"]) == 1 and sum(data["last_hour"]["answers"]) == 2
    assert len(data["last_hour"]["labels"]) == 60
    assert sum(data["today"]["tokens"]) == 120


def test_the_console_index_is_the_dashboard(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()

    assert 'id="chart-last-hour"' in page and 'id="dashboard-data"' in page
    assert "vendor/chart.js/chart.umd.js" in page and "console/dashboard.js" in page
    assert reverse("admin:console-dashboard-data") in page

"""`/` for anonymous visitors: what the product is, the plans and their prices, and the way in."""

import re

from django.urls import reverse

from billing.models import Plan
from billing.seed import seed_plans


def test_anonymous_visitors_see_what_it_is_the_plans_and_how_to_start(client, db):
    seed_plans(Plan)
    Plan.objects.filter(slug="plus").update(monthly_price_cents=1250, description="Every model, for daily work.")
    Plan.objects.create(
        slug="staff-only",
        name="Internal",
        monthly_price_cents=0,
        requests_per_minute=1,
        tokens_per_month=1,
        max_output_tokens=1,
        max_context_tokens=1,
        is_public=False,
    )

    response = client.get(reverse("home"))

    assert response.status_code == 200
    body = response.content.decode()
    assert "SGLang" in body
    for name in ("Free", "Plus", "Pro"):
        assert f'id="plan-{name.lower()}"' in body
    assert "12.50" in body and "Every model, for daily work." in body  # from the Plan table, as edited
    assert "50.00" in body
    assert "Internal" not in body  # plans that are not public are not offered
    assert f'href="{reverse("account_login")}"' in body
    assert f'href="{reverse("account_signup")}"' in body


def test_the_landing_page_says_when_the_engine_is_simulated(client, db, settings):
    settings.SGLANG_SIMULATED = True
    assert "Simulated engine" in client.get(reverse("home")).content.decode()
    settings.SGLANG_SIMULATED = False
    assert "Simulated engine" not in client.get(reverse("home")).content.decode()


def test_signed_in_people_get_the_chat_at_the_same_address(user_client):
    response = user_client.get(reverse("home"))
    assert response.status_code == 200
    assert "chat/chat.html" in [t.name for t in response.templates]


def test_a_conversation_address_still_asks_visitors_to_sign_in(client, db):
    response = client.get(reverse("chat-conversation", args=[1]))
    assert response.status_code == 302 and response.url.startswith(reverse("account_login"))


def test_the_landing_page_states_each_plans_context_as_the_models_hold_it(client, db, settings):
    seed_plans(Plan)
    settings.INFERENCE_CONTEXT_TOKENS = 8192  # below Plus's 16,384 and Pro's 32,768

    body = client.get(reverse("home")).content.decode()

    contexts = re.findall(r"<dt>Context</dt><dd>(.*?)</dd>", body)
    assert contexts == ["4,096 tokens", "8,192 tokens", "8,192 tokens"]
    assert "16,384" not in body and "32,768" not in body

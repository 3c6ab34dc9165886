"""The staff console in a real browser: a staff member signs in with their password and authenticator
code, lands on the dashboard (charts drawn, figures refreshed every 30 s), and opens the users list.

Screenshots go to a temporary directory, or to docs/screenshots/ (committed) with E2E_SCREENSHOTS=1:

    E2E_SCREENSHOTS=1 .venv/bin/pytest tests/e2e/test_console.py
"""

import math
import re
import secrets
from datetime import timedelta

import pytest
from allauth.mfa.totp.internal.auth import generate_totp_secret
from django.utils import timezone
from playwright.sync_api import expect

from audit.models import AuditEntry
from billing.models import Plan, Subscription, UsageRecord
from billing.seed import seed_plans
from billing.selectors import plans_and_usage
from chat.models import Conversation, Message
from config.refusal_counts import REFUSALS
from console.service_load import SERVICE_LOAD
from moderation.models import Flag
from tests.conftest import PASSWORD, make_user
from tests.e2e.conftest import PHONE
from tests.support.accounts import authenticator_code, make_staff

pytestmark = pytest.mark.e2e

CHARTS = [
    "chart-last-hour",
    "chart-load",
    "chart-ttft",
    "chart-tokens",
    "chart-cache",
    "chart-refused",
    "chart-moderation",
    "chart-today",
    "chart-saved",
]


def sign_in_with_code(page, email: str, secret: str) -> None:
    page.goto("/accounts/login/?next=/admin/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign In").click()
    page.locator('input[name="code"]').fill(authenticator_code(secret))
    page.get_by_role("button", name=re.compile("Sign In", re.I)).click()


@pytest.fixture
def staff(transactional_db):
    """A superuser with an authenticator, a day of activity and an hour of service for the dashboard."""
    seed_plans(Plan)  # a transactional test starts from an emptied database
    secret = generate_totp_secret()
    person = make_staff("operator@example.com", secret=secret, is_superuser=True, display_name="Operator")
    now = timezone.now()
    pro, team = Plan.objects.get(slug="pro"), Plan.objects.order_by("-monthly_price_cents").first()
    people = [
        make_user(f"{name}@example.com", display_name=name.title())
        for name in ("ada", "grace", "alan", "edsger", "barbara", "donald", "margaret", "ken")
    ]
    people[3].is_suspended, people[3].suspended_reason = True, "Spam wave #88"
    people[3].save()
    for n, (person_, plan) in enumerate(zip(people[:4], (pro, pro, team, pro), strict=True)):
        Subscription.objects.create(
            user=person_,
            plan=plan,
            status=Subscription.Status.ACTIVE,
            provider="stripe",
            provider_subscription_id=f"sub_{n}",
            current_period_start=now - timedelta(days=3),
            current_period_end=now + timedelta(days=27),
        )
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    hours_today = max(int((now - midnight).total_seconds() // 3600), 1)
    record = 0
    for n, owner in enumerate(people):
        conversation = Conversation.objects.create(owner=owner, model="demo")
        for k in range(6 + n % 4):
            question = Message.objects.create(conversation=conversation, role=Message.Role.USER, content="question")
            answer = Message.objects.create(
                conversation=conversation,
                role=Message.Role.ASSISTANT,
                parent=question,
                content="answer",
                completion_tokens=120 + 40 * k,
                node="default",
                ttft_ms=140 + 37 * ((n * 7 + k * 5) % 11) + (600 if (n + k) % 13 == 0 else 0),
                # The engine's request id and the trace of the request that started it (config/tracing.py).
                request_id=secrets.token_hex(16),
                trace_id=secrets.token_hex(16),
            )
            asked = now - timedelta(minutes=(7 * n + 11 * k) % 58, seconds=50)
            Message.objects.filter(pk=question.pk).update(created=asked)
            Message.objects.filter(pk=answer.pk).update(created=asked, finished=asked + timedelta(seconds=8 + k))
            # Each turn repeats the conversation so far: the engine's prefix cache serves most of it.
            record += 1
            UsageRecord.objects.create(
                user=owner,
                reservation_id=f"r{record}",
                generation_id=f"g{record}",
                plan_slug="pro",
                model="demo",
                conversation_id=conversation.pk,
                node="default",
                prompt_tokens=300 + 90 * k,
                cached_tokens=(300 + 90 * k) * k // (k + 2),
                completion_tokens=120 + 40 * k,
                billable_tokens=420 + 130 * k,
                created=asked + timedelta(seconds=8 + k),
            )
            record += 1
            UsageRecord.objects.create(
                user=owner,
                reservation_id=f"r{record}",
                generation_id=f"g{record}",
                plan_slug="pro",
                model="demo",
                prompt_tokens=300 + 90 * k,
                completion_tokens=120 + 40 * k,
                billable_tokens=420 + 130 * k,
                created=max(
                    midnight,
                    min(now - timedelta(hours=1), midnight + timedelta(hours=(n + 2 * k) % hours_today, minutes=k)),
                ),
            )
        # A program on the API: a completion every few minutes.
        for k in range(3):
            record += 1
            UsageRecord.objects.create(
                user=owner,
                reservation_id=f"r{record}",
                generation_id=f"g{record}",
                plan_slug="pro",
                model="demo",
                api_key_id=n + 1,
                node="default",
                prompt_tokens=900,
                cached_tokens=600,
                completion_tokens=350,
                billable_tokens=1100,
                created=now - timedelta(minutes=(5 * n + 19 * k) % 57),
            )
    Message.objects.create(conversation=conversation, role=Message.Role.ASSISTANT, status=Message.Status.BLOCKED)
    for n, (source, category, blocked) in enumerate(
        [
            ("input", "Spam", True),
            ("input", "Spam", True),
            ("input", "Credential phishing", True),
            ("output", "Offensive language", True),
            ("input", "Self-harm", False),
            ("user_report", "", False),
            ("input", "Spam", True),
            ("output", "Credential phishing", True),
        ]
    ):
        flag = Flag.objects.create(user=people[n % 8], source=source, category=category, blocked=blocked)
        Flag.objects.filter(pk=flag.pk).update(created=now - timedelta(minutes=(9 * n + 4) % 55))
    # What the server counted and sampled over the hour (the gate's refusals; the load task's peaks).
    ts = now.timestamp()
    for minutes, status, times in ((3, "429", 4), (4, "429", 2), (17, "429", 5), (18, "503", 3), (41, "429", 1)):
        REFUSALS.add(status, times, now=ts - 60 * minutes)
    for minute in range(60):
        running = round(9 + 6 * math.sin(minute / 7))
        waiting = max(round(7 * math.sin(minute / 4) - 3), 0)  # bursts the engine queues
        SERVICE_LOAD.record(
            {"in_flight": running + waiting + minute % 3, "running:default": running, "waiting:default": waiting},
            now=ts - 60 * minute,
        )
    return person, secret


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_staff_open_the_dashboard_and_the_users_list(open_page, staff, screenshot_dir, theme):
    person, secret = staff
    page = open_page(None, theme=theme)
    page.clock.install()
    static_failures = []
    page.on("response", lambda r: "/static/" in r.url and not r.ok and static_failures.append(r.url))

    sign_in_with_code(page, person.email, secret)

    expect(page).to_have_url(re.compile(r"/admin/$"))
    expect(page.get_by_role("heading", name="Dashboard", exact=True)).to_be_visible()
    users = page.locator('[data-figure="users.total"]')
    expect(users).to_have_text("9")
    # Chart.js drew every chart (a canvas it has sized).
    for chart in CHARTS:
        expect(page.locator(f"#{chart}")).to_have_attribute("style", re.compile("height"))
    expect(page.locator("#dashboard-plans")).to_contain_text("Pro")
    # The service's hour: refusals, moderation by category, the engines now.
    refused = page.locator('[data-figure="service.refused_429"]')
    expect(refused).to_have_text("12")
    expect(page.locator('[data-figure="service.refused_503"]')).to_have_text("3")
    expect(page.locator("#dashboard-moderation tr").first).to_contain_text("Spam")
    expect(page.locator("#dashboard-nodes tr", has_text="default")).to_be_visible()
    drawn = page.evaluate(
        """ids => ids.map(id => {
        const chart = Chart.getChart(id);
        return chart.data.datasets.reduce((n, set) => n + set.data.filter(v => v !== null && v !== 0).length, 0);
    })""",
        CHARTS,
    )
    assert all(drawn), dict(zip(CHARTS, drawn, strict=True))  # every chart has figures to show
    # Counts per minute are points joined by lines, not curves that overshoot them (issue 24).
    curved = page.evaluate(
        """ids => ids.flatMap(id => {
        const chart = Chart.getChart(id);
        return chart.data.datasets
            .filter(set => (set.type || chart.config.type) === "line")
            .filter(set => (set.tension || 0) > 0 && set.cubicInterpolationMode !== "monotone")
            .map(set => `${id}: ${set.label}`);
    })""",
        CHARTS,
    )
    assert not curved, curved
    # On a wide screen the dashboard uses the width beside the navigation, not 60% of it (issue 24).
    page.set_viewport_size({"width": 1920, "height": 1080})
    used = page.evaluate("() => document.querySelector('#content').getBoundingClientRect().width / window.innerWidth")
    assert used > 0.8, used
    page.set_viewport_size({"width": 1280, "height": 800})
    # The sections of the navigation, in the product's words.
    for section in ("People", "Billing", "Chat", "Audit"):
        expect(page.locator("#content-main").get_by_role("link", name=section, exact=True)).to_be_visible()
    page.screenshot(path=screenshot_dir / f"console-dashboard-{theme}.png", full_page=True)

    # 30 seconds later the figures refresh without reloading the page.
    make_user("newcomer@example.com")
    REFUSALS.add("429")
    page.clock.run_for(31_000)
    expect(users).to_have_text("10")
    expect(refused).to_have_text("13")

    page.get_by_role("link", name="Users", exact=True).first.click()
    expect(page).to_have_url(re.compile(r"/admin/accounts/user/$"))
    row = page.locator("#result_list tr", has_text="ada@example.com")
    expect(row.locator(".field-plan")).to_have_text("Pro")
    expect(row.locator(".field-usage_this_period")).to_contain_text(re.compile(r"^\s*[\d,]+ of 25M\s*$"))
    expect(page.locator("#result_list tr", has_text="edsger@example.com")).to_contain_text("suspended")
    if theme == "light":
        page.screenshot(path=screenshot_dir / "console-users-light.png")

        # Reading a conversation: a reason first, then the text, and the audit log says so.
        page.get_by_role("link", name="Conversations", exact=True).first.click()
        page.locator("#result_list tbody tr").first.locator("th a").click()
        expect(page.get_by_label("Reason for reading it")).to_be_visible()
        expect(page.locator("#content")).not_to_contain_text("question")
        page.get_by_label("Reason for reading it").fill("Abuse report #77")
        page.get_by_role("button", name="Read the conversation").click()
        expect(page.locator(".console-transcript li").first).to_contain_text("question")
        assert AuditEntry.objects.filter(actor=person, action="conversation.view", reason="Abuse report #77").exists()
        # Each answer says which engine request and which trace it was, to follow a slow one.
        read = Conversation.objects.get(pk=int(re.search(r"/conversation/(\d+)/", page.url).group(1)))
        traced = read.messages.filter(role=Message.Role.ASSISTANT).exclude(trace_id="").first()
        expect(page.locator(".console-message-ids", has_text=traced.trace_id)).to_contain_text(traced.request_id)
        page.screenshot(path=screenshot_dir / "console-conversation-light.png")

        # A person's page: plan, usage, keys, activity and flags at a glance, and the plan changed from it.
        page.goto(f"/admin/accounts/user/{read.owner_id}/change/")
        overview = page.get_by_role("region", name="Overview")
        line = plans_and_usage([read.owner])[read.owner_id]
        expect(overview).to_contain_text(f"{line.plan.name} · ")
        expect(overview).to_contain_text(f"{line.billable_tokens:,} of {line.plan.tokens_per_month:,}")
        page.screenshot(path=screenshot_dir / "console-user-light.png")
        page.get_by_role("link", name="Change plan…").click()
        expect(page.get_by_label("Reason")).to_be_visible()
        page.screenshot(path=screenshot_dir / "console-change-plan-light.png")

        page.set_viewport_size(PHONE)
        page.goto("/admin/")
        expect(page.get_by_role("heading", name="Dashboard", exact=True)).to_be_visible()
        page.screenshot(path=screenshot_dir / "console-dashboard-phone-light.png", full_page=True)
    assert not static_failures, f"static files that did not load: {static_failures}"


def test_staff_see_the_nodes_health_and_load_and_drain_one(open_page, staff, screenshot_dir):
    from inference import samples
    from inference.loads import EngineLoad
    from inference.models import InferenceNode

    person, secret = staff
    now = timezone.now()
    fleet = [
        (
            "gpu-1",
            "up",
            EngineLoad(running_requests=42, waiting_requests=3, used_tokens=0, token_usage=0.61, cache_hit_rate=0.83),
        ),
        (
            "gpu-2",
            "up",
            EngineLoad(running_requests=37, waiting_requests=0, used_tokens=0, token_usage=0.48, cache_hit_rate=0.79),
        ),
        ("gpu-3", "down", None),
    ]
    for n, (name, health, load) in enumerate(fleet, start=1):
        InferenceNode.objects.create(
            name=name,
            base_url=f"http://10.0.0.{n}:30000",
            model_ids=["qwen2.5-7b"],
            health=health,
            last_checked=now,
            api_key="secret-key-never-shown",
            last_error="" if load else "/health: ConnectError: connection refused",
        )
        if load is not None:
            samples.record(name, load)
    page = open_page(None, theme="light")
    sign_in_with_code(page, person.email, secret)
    page.goto("/admin/inference/inferencenode/")
    row = page.locator("#result_list tr", has_text="gpu-1")
    expect(row).to_contain_text("42 running · 3 queued · KV 61% · cache hits 83%")
    expect(page.locator("#result_list tr", has_text="gpu-3")).to_contain_text("down")
    page.set_viewport_size({"width": 1500, "height": 720})
    page.screenshot(path=screenshot_dir / "console-nodes-light.png")

    # The stored API key is never shown back, and drain is one action away.
    page.locator("#result_list tr", has_text="gpu-1").locator("th a").click()
    assert "secret-key-never-shown" not in page.content()
    page.goto("/admin/inference/inferencenode/")
    page.locator("#result_list tr", has_text="gpu-2").locator("input.action-select").check()
    page.locator("select[name=action]").select_option("drain_nodes")
    page.get_by_role("button", name=re.compile("Go|Run", re.I)).click()
    expect(page.locator("#result_list tr", has_text="gpu-2")).to_contain_text("draining")
    assert InferenceNode.objects.get(name="gpu-2").draining
    assert AuditEntry.objects.filter(actor=person, action="inference.drain").exists()


def test_staff_turn_the_semantic_cache_on_and_set_autos_share_in_the_console(open_page, staff, screenshot_dir):
    from chat.models import AutoModelPolicy, SemanticCachePolicy

    person, secret = staff
    page = open_page(None, theme="light")
    sign_in_with_code(page, person.email, secret)
    page.goto("/admin/")
    page.get_by_role("link", name="Semantic cache").first.click()
    page.get_by_label("Enabled").check()
    page.get_by_label("Threshold").fill("0.93")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    policy = SemanticCachePolicy.objects.get()
    assert (policy.enabled, policy.threshold, policy.scope) == (True, 0.93, "person")
    page.get_by_role("link", name="Semantic cache").first.click()
    expect(page.locator(".readonly").first).to_contain_text("first answers in the web chat")
    page.set_viewport_size({"width": 1280, "height": 760})
    page.screenshot(path=screenshot_dir / "console-semantic-cache-light.png")

    page.goto("/admin/")
    page.get_by_role("link", name="Auto model").first.click()
    expect(page.locator("body")).to_contain_text("Auto is not offered")  # this server names no two models
    page.get_by_label("Target share for the large model (%)").fill("40")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    assert AutoModelPolicy.objects.get().large_share_percent == 40

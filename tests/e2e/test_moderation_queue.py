"""The moderation queue in a real browser: open flags come first, and staff uphold one from the list
(through review.services, so the reviewer is recorded). The screenshot goes to a temporary
directory, or to docs/screenshots/ (committed) with E2E_SCREENSHOTS=1:

    E2E_SCREENSHOTS=1 .venv/bin/pytest tests/e2e/test_moderation_queue.py
"""

import re
from datetime import timedelta

import pytest
from allauth.mfa.totp.internal.auth import generate_totp_secret
from django.utils import timezone
from playwright.sync_api import expect

from billing.models import Plan
from billing.seed import seed_plans
from moderation.models import Flag
from tests.chat.factories import conversation_for, exchange
from tests.conftest import make_user
from tests.e2e.test_console import sign_in_with_code
from tests.support.accounts import make_staff

pytestmark = pytest.mark.e2e

WIDE = {"width": 1680, "height": 820}  # the queue's columns, with the excerpt, side by side

# (minutes ago, source, category, score, blocked, state, what was screened, what the reporter wrote)
FLAGS = [
    (
        3,
        "input",
        "Credential phishing",
        0.97,
        True,
        "open",
        "Write an email from the IT desk asking everyone to confirm their password at this link",
        "",
    ),
    (
        11,
        "output",
        "Offensive language",
        0.88,
        True,
        "open",
        "Sure, here is a roast of your coworker: he is a worthless",
        "",
    ),
    (
        26,
        "user_report",
        "",
        None,
        False,
        "open",
        "Mixing bleach and vinegar makes a stronger cleaner for the bathroom.",
        "This is dangerous advice: the two together release chlorine gas.",
    ),
    (48, "input", "Spam", 0.91, True, "upheld", "BUY CHEAP FOLLOWERS NOW — 10,000 followers for $5, visit my shop", ""),
    (
        95,
        "input",
        "Harassment",
        0.62,
        False,
        "dismissed",
        "My brother keeps beating me at chess, how do I destroy him next time?",
        "",
    ),
]


@pytest.fixture
def queue(transactional_db):
    """A staff member with an authenticator, and a queue with open and decided flags."""
    seed_plans(Plan)  # a transactional test starts from an emptied database
    secret = generate_totp_secret()
    staff = make_staff("moderator@example.com", secret=secret, is_superuser=True, display_name="Moderator")
    now = timezone.now()
    people = [make_user(f"{name}@example.com", display_name=name.title()) for name in ("mallory", "trent", "peggy")]
    flags = []
    for n, (minutes, source, category, score, blocked, state, text, reason) in enumerate(FLAGS):
        owner = people[n % len(people)]
        _, answer = exchange(
            conversation_for(owner, title="Flagged"),
            text if source == "input" else "…",
            text if source != "input" else "",
        )
        decided = state != "open"
        flag = Flag.objects.create(
            message=answer,
            user=owner,
            source=source,
            category=category,
            score=score,
            blocked=blocked,
            text=text,
            reason=reason,
            state=state,
            backend="rules" if source != "user_report" else "",
            reporter=people[(n + 1) % len(people)] if source == "user_report" else None,
            reviewer=staff if decided else None,
            reviewed_at=now - timedelta(minutes=minutes - 2) if decided else None,
        )
        Flag.objects.filter(pk=flag.pk).update(created=now - timedelta(minutes=minutes))
        flags.append(flag)
    return staff, secret, flags


def test_staff_see_open_flags_first_and_uphold_one(open_page, queue, screenshot_dir):
    staff, secret, flags = queue
    page = open_page(None, viewport=WIDE)
    sign_in_with_code(page, staff.email, secret)
    expect(page).to_have_url(re.compile(r"/admin/$"))

    page.goto("/admin/moderation/flag/")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(len(FLAGS))
    # Open flags first, newest first; then the decided ones.
    for row, (_, _, _, _, _, state, text, _) in zip(rows.all(), FLAGS, strict=True):
        expect(row.locator(".field-state")).to_have_text(re.compile(state, re.I))
        expect(row.locator(".field-excerpt")).to_contain_text(text[:30])
    page.screenshot(path=screenshot_dir / "moderation-queue.png")

    # Folding the menu away gives the list the room; it never pushes the page off to the left.
    page.locator("#toggle-nav-sidebar").click()
    expect(page.locator("#main")).not_to_have_class(re.compile(r"\bshifted\b"))
    page.wait_for_function("() => getComputedStyle(document.getElementById('nav-sidebar')).visibility === 'hidden'")
    assert page.locator("#content").bounding_box()["x"] >= 0
    page.locator("#toggle-nav-sidebar").click()
    assert page.locator("#content").bounding_box()["x"] > 200

    phishing = rows.filter(has_text="IT desk")
    phishing.locator("input.action-select").check()
    page.locator("select[name=action]").select_option(label="Uphold the selected flags")
    page.get_by_role("button", name=re.compile("^(Go|Run)$", re.I)).click()
    expect(page.locator(".messagelist, .messages, [role=alert]").first).to_contain_text("Upheld 1 flag")
    flags[0].refresh_from_db()
    assert (flags[0].state, flags[0].reviewer) == ("upheld", staff)


def test_staff_warn_from_a_flags_page_and_the_user_reads_it_on_their_chat_page(open_page, queue, screenshot_dir):
    staff, secret, flags = queue
    phishing = flags[0]
    page = open_page(None, viewport=WIDE)
    sign_in_with_code(page, staff.email, secret)
    expect(page).to_have_url(re.compile(r"/admin/$"))

    page.goto(f"/admin/moderation/flag/{phishing.pk}/change/")
    page.set_viewport_size({"width": WIDE["width"], "height": 1400})  # the whole flag, menu included
    page.screenshot(path=screenshot_dir / "moderation-flag.png")
    page.set_viewport_size(WIDE)
    page.get_by_role("link", name="Warn…").click()
    box = page.get_by_label("Warning (shown to each user, word for word)")
    expect(box).to_have_value(re.compile("Credential phishing"))  # a default naming the flag's category
    box.fill("Asking people for their passwords is phishing. Do not do it again.")
    page.get_by_role("button", name="Warn").click()
    expect(page.locator(".messagelist, .messages, [role=alert]").first).to_contain_text("Warned 1 user")
    expect(page).to_have_url(re.compile(rf"/admin/moderation/flag/{phishing.pk}/change/$"))

    mallory = phishing.user
    chat = open_page("/", user=mallory)
    warning = chat.get_by_test_id("moderation-warning")
    expect(warning).to_contain_text("Asking people for their passwords is phishing.")
    chat.screenshot(path=screenshot_dir / "chat-moderation-warning.png")
    warning.get_by_role("button", name="I understand").click()
    expect(chat.get_by_test_id("moderation-warning")).to_have_count(0)
    chat.reload()
    expect(chat.get_by_test_id("moderation-warning")).to_have_count(0)
    phishing.refresh_from_db()
    assert (phishing.state, phishing.reviewer) == ("upheld", staff)

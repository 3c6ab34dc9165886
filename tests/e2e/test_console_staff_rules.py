"""A moderator in the console, in Chromium (signed in with their authenticator code): suspending a
superuser is refused with a sentence on the page, and a rating's page asks for a reason before it
shows the conversation that led to the answer. Both pages work under the Content-Security-Policy.

The rules themselves are proved in-process (tests/console/test_suspending_staff.py,
tests/console/test_reading_conversations.py); this shows what the moderator sees."""

import re

import pytest
from allauth.mfa.totp.internal.auth import generate_totp_secret
from django.contrib.auth.models import Group
from playwright.sync_api import expect

from audit.models import AuditEntry
from chat.feedback import services as feedback
from console.roles import MODERATOR_GROUP
from tests.chat.factories import conversation_for, exchange
from tests.conftest import make_user
from tests.e2e.test_console import sign_in_with_code
from tests.support.accounts import make_staff

pytestmark = pytest.mark.e2e


@pytest.fixture
def moderator(transactional_db):
    secret = generate_totp_secret()
    person = make_staff("mod@example.com", secret=secret)
    person.groups.add(Group.objects.get(name=MODERATOR_GROUP))
    return person, secret


def test_a_moderator_is_refused_suspending_a_superuser_and_asked_a_reason_to_read_a_rated_answer(
    open_page, moderator, screenshot_dir
):
    person, secret = moderator
    root = make_user("root@example.com", staff=True, is_superuser=True)
    owner = make_user("ada@example.com")
    conversation = conversation_for(owner, title="Lisbon trip", system_prompt="Answer as a travel agent.")
    _, answer = exchange(conversation, "Where should I stay near the river?", "Alfama, above the river.")
    feedback.rate_answer(owner, answer.pk, "down", "Name a street.")
    page = open_page(None)
    sign_in_with_code(page, person.email, secret)
    expect(page).to_have_url(re.compile(r"/admin/$"))

    # The users list: select the superuser, "Suspend the selected users…", a reason, Suspend.
    page.goto("/admin/accounts/user/")
    page.locator("#result_list tr", has_text="root@example.com").locator("input.action-select").check()
    page.locator('select[name="action"]').select_option("suspend")
    page.get_by_role("button", name="Go").click()
    page.get_by_label("Reason (shown to each user, word for word)").fill("Lock them out")
    page.get_by_role("button", name="Suspend", exact=True).click()
    refusal = page.locator("ul.messagelist li.error")
    expect(refusal).to_contain_text("Only a superuser can suspend or ban staff (root@example.com)")
    expect(refusal).to_contain_text("the attempt is recorded in the audit log")
    page.screenshot(path=screenshot_dir / "console-suspension-refused-light.png")
    root.refresh_from_db()
    assert not root.is_suspended
    assert AuditEntry.objects.filter(actor=person, action="user.suspend.refused", target_id=str(root.pk)).exists()

    # Answer feedback: the rating shows; what led to it only after a reason.
    page.get_by_role("link", name="Answer feedback", exact=True).first.click()
    expect(page.locator("#result_list")).to_contain_text("Name a street.")
    expect(page.locator("#content")).not_to_contain_text("Where should I stay")
    page.locator("#result_list tbody tr").first.locator("th a").first.click()
    expect(page.get_by_label("Reason for reading it")).to_be_visible()
    expect(page.locator("#content")).to_contain_text("Name a street.")
    expect(page.locator("#content")).not_to_contain_text("Where should I stay")
    expect(page.locator("#content")).not_to_contain_text("travel agent")
    page.screenshot(path=screenshot_dir / "console-feedback-reason-light.png")
    page.get_by_label("Reason for reading it").fill("Evaluating bad answers")
    page.get_by_role("button", name="Read the conversation up to this answer").click()
    context = page.locator("ol.feedback-context")
    expect(context).to_contain_text("Answer as a travel agent.")
    expect(context).to_contain_text("Where should I stay near the river?")
    expect(context).to_contain_text("Alfama, above the river.")
    page.screenshot(path=screenshot_dir / "console-feedback-read-light.png")
    entry = AuditEntry.objects.get(action="conversation.view")
    assert (entry.actor, entry.target_id, entry.reason) == (person, str(conversation.pk), "Evaluating bad answers")

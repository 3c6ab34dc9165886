"""A person whose account staff suspend while the chat is open is told so, with the reason, at once."""

import re

import pytest
from playwright.sync_api import expect

from accounts.services import suspend_user
from chat.models import Message
from tests.e2e.chatpage import TIMEOUT
from tests.e2e.conftest import DESKTOP, PHONE

pytestmark = pytest.mark.e2e

REASON = "Sending spam to other users"


def test_an_open_chat_page_says_the_account_is_suspended_and_why_and_stops_sending(open_chat, chat_user):
    chat = open_chat()
    answer = chat.send("Hello before anything happened.")
    chat.wait_for_status(answer, "completed")

    suspend_user(chat_user, REASON)
    chat.prompt.fill("Are you still there?")
    chat.prompt.press("Enter")

    expect(chat.notice).to_be_visible(timeout=TIMEOUT)
    expect(chat.notice).to_contain_text("Your account is suspended")
    expect(chat.notice).to_contain_text(f"Reason: {REASON}")
    expect(chat.notice).not_to_contain_text(re.compile("try again|403|sign in", re.IGNORECASE))
    expect(chat.notice.get_by_role("link", name="See plans")).to_have_count(0)
    expect(chat.page.get_by_role("alert")).to_contain_text(REASON)
    # Send stays off, even with text in the box; what was typed is kept.
    expect(chat.prompt).to_have_value("Are you still there?")
    expect(chat.send_button).to_be_disabled()
    chat.prompt.press("Enter")
    expect(chat.questions()).to_have_count(1)
    assert Message.objects.filter(role="user").count() == 1

    # The next action is told the same, not "Sign in to continue", and the notice stays.
    chat.sidebar.get_by_role("button", name="New chat", exact=True).click()
    chat.prompt.fill("One more try")
    expect(chat.send_button).to_be_disabled()
    expect(chat.notice).to_contain_text(f"Reason: {REASON}")

    # Reloading shows the page that says why, with a way to sign out.
    chat.page.reload()
    expect(chat.page.get_by_role("heading", name="Your account is suspended")).to_be_visible()
    expect(chat.page.get_by_test_id("suspension-sentence")).to_contain_text(REASON)
    chat.page.get_by_role("main").get_by_role("button", name="Sign out").click()
    expect(chat.page).to_have_url(re.compile(r"/$"))
    expect(chat.page.get_by_role("link", name="Sign in").first).to_be_visible()


LONG = " ".join(f"Line {n} keeps the answer busy while staff act." for n in range(1, 61))


@pytest.mark.parametrize("screen", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_suspension_mid_answer_is_said_once_stops_the_answer_with_its_reason_and_clears_the_dot(
    open_chat, chat_user, screen
):
    chat = open_chat(viewport=screen)
    answer = chat.send(LONG)
    chat.wait_for_answer_text(answer, 10)
    item = chat.page.locator("li.conv-item").first
    expect(item).to_have_attribute("data-generating", "true", timeout=TIMEOUT)

    suspend_user(chat_user, REASON)

    assert chat.wait_for_status(answer, "stopped") == "stopped"
    # The answer says why it stopped, here and in what was saved.
    expect(answer.locator(".msg-notice")).to_have_text("Stopped: your account was suspended.", timeout=TIMEOUT)
    assert Message.objects.get(pk=chat.message_id(answer)).error == "Stopped: your account was suspended."
    # The reason is given once, in the composer's notice, not once per channel that heard it.
    expect(chat.notice).to_contain_text(f"Reason: {REASON}", timeout=TIMEOUT)
    chat.page.wait_for_timeout(1500)  # let every channel's refusal arrive (the stream's, the WebSocket's)
    assert chat.page.locator("body").inner_text().count(f"Reason: {REASON}") == 1
    expect(chat.notice.locator(".notice-title")).to_have_count(1)
    # No chat in the sidebar still shows it is being written.
    expect(item).to_have_attribute("data-generating", "false", timeout=TIMEOUT)
    expect(chat.page.locator(".gen-dot")).to_have_count(0)

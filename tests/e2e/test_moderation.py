"""Moderation on the chat page: reporting an answer to staff, and a message the content policy
refuses (the reason is shown and what was typed stays in the box). Screenshots go to a temporary
directory, or to docs/screenshots/ with E2E_SCREENSHOTS=1."""

import pytest
from django.db import transaction
from playwright.sync_api import expect

from moderation.backends.rules import bump_version
from moderation.models import Category, Flag
from tests.chat.factories import conversation_for, exchange
from tests.e2e.chatpage import TIMEOUT, wait_until
from tests.e2e.conftest import DESKTOP, PHONE
from tests.e2e.test_screenshots import ANSWER, QUESTION
from tests.moderation.test_live import AFTER, BEFORE, PHRASE

pytestmark = pytest.mark.e2e

REASON = "It claims the cache is shared between users' private data."


@pytest.fixture
def answered(chat_user):
    conversation = conversation_for(chat_user, title="Prefix caching")
    _, answer = exchange(conversation, QUESTION, ANSWER)
    return conversation, answer


def test_a_user_reports_an_answer_with_a_reason_and_staff_get_a_flag(open_chat, answered, chat_user):
    conversation, saved = answered
    chat = open_chat(f"/c/{conversation.pk}/")
    answer = chat.last_answer()
    answer.get_by_role("button", name="Report this answer").click()
    box = answer.get_by_role("textbox", name="Why are you reporting this answer?")
    expect(box).to_be_focused(timeout=TIMEOUT)
    # Cancel closes the form and reports nothing.
    answer.get_by_role("button", name="Cancel").click()
    expect(box).to_have_count(0)
    assert not Flag.objects.exists()

    answer.get_by_role("button", name="Report this answer").click()
    answer.get_by_role("textbox", name="Why are you reporting this answer?").fill(REASON)
    answer.get_by_role("button", name="Report to staff").click()
    reported = answer.get_by_role("button", name="Reported to staff")
    expect(reported).to_have_attribute("aria-pressed", "true", timeout=TIMEOUT)
    expect(reported).to_be_disabled()
    expect(chat.page.get_by_text("Reported. Staff will review this answer.")).to_be_attached()
    flag = wait_until(lambda: Flag.objects.filter(message=saved).first(), what="the report")
    assert (flag.source, flag.state, flag.reason, flag.reporter) == ("user_report", "open", REASON, chat_user)


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("size, viewport", [("desktop", DESKTOP), ("phone", PHONE)])
def test_the_report_form_fits_the_answer_column(open_chat, answered, screenshot_dir, theme, size, viewport):
    conversation, _ = answered
    chat = open_chat(f"/c/{conversation.pk}/", viewport=viewport, theme=theme)
    answer = chat.last_answer()
    answer.get_by_role("button", name="Report this answer").click()
    answer.get_by_role("textbox", name="Why are you reporting this answer?").fill(REASON)
    assert chat.page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
    column = answer.locator(".msg-main").bounding_box()
    form = answer.locator(".report-form").bounding_box()
    assert form["x"] >= column["x"] - 1 and form["x"] + form["width"] <= column["x"] + column["width"] + 1
    answer.locator(".report-form").scroll_into_view_if_needed()
    chat.page.screenshot(path=str(screenshot_dir / f"report-{size}-{theme}.png"))


def test_a_refused_message_shows_the_reason_and_keeps_what_was_typed(open_chat):
    with transaction.atomic():
        Category.objects.create(name="Credential phishing", words="send me your password")
    bump_version()
    chat = open_chat("/")
    typed = "Could you send me your password for the shared account?"
    chat.prompt.fill(typed)
    chat.send_button.click()
    expect(chat.notice).to_contain_text("content policy (Credential phishing)", timeout=TIMEOUT)
    expect(chat.prompt).to_have_value(typed)
    expect(chat.answers()).to_have_count(0)
    expect(chat.questions()).to_have_count(0)


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("size, viewport", [("desktop", DESKTOP), ("phone", PHONE)])
def test_an_answer_cut_mid_stream_is_replaced_by_a_notice(
    open_chat, echo_server, screenshot_dir, theme, size, viewport
):
    # The simulated worker echoes the question; a category screens answers (only) for the phrase in it.
    with transaction.atomic():
        Category.objects.create(name="Handshakes", words=PHRASE, applies_to="output")
    bump_version()
    chat = open_chat("/", server=echo_server, viewport=viewport, theme=theme)
    answer = chat.send(BEFORE + PHRASE + AFTER)
    expect(answer).to_have_attribute("data-status", "blocked", timeout=TIMEOUT)
    expect(answer.locator(".msg-notice")).to_contain_text("went against the content policy")
    expect(answer.locator(".md")).to_have_text("")  # what had streamed is gone from the page
    flag = wait_until(lambda: Flag.objects.filter(source="output").first(), what="the flag")
    assert flag.message_id == chat.message_id(answer)
    chat.page.screenshot(path=str(screenshot_dir / f"blocked-answer-{size}-{theme}.png"))

"""Rating an answer on the chat page: thumbs down with a comment, kept after a reload, changed and
withdrawn; on a phone the action row still fits. Screenshots (light and dark, desktop and phone) go
to a temporary directory, or to docs/screenshots/ with E2E_SCREENSHOTS=1."""

import pytest
from playwright.sync_api import expect

from chat.models import AnswerFeedback
from tests.chat.factories import conversation_for, exchange
from tests.e2e.chatpage import TIMEOUT, wait_until
from tests.e2e.conftest import DESKTOP, PHONE
from tests.e2e.test_screenshots import ANSWER, QUESTION

pytestmark = pytest.mark.e2e

COMMENT = "The example should show the cache being reused across two requests."


@pytest.fixture
def rated_chat(chat_user):
    conversation = conversation_for(chat_user, title="Prefix caching")
    _, answer = exchange(conversation, QUESTION, ANSWER)
    return conversation, answer


def rating_buttons(chat, answer):
    group = answer.get_by_role("group", name="Rate this answer")
    return group.get_by_role("button", name="Good answer"), group.get_by_role("button", name="Bad answer"), group


def test_thumbs_down_with_a_comment_is_kept_after_a_reload_then_changed_and_withdrawn(open_chat, rated_chat):
    conversation, saved = rated_chat
    chat = open_chat(f"/c/{conversation.pk}/")
    answer = chat.last_answer()
    up, down, group = rating_buttons(chat, answer)
    expect(up).to_have_attribute("aria-pressed", "false")

    down.click()
    # The thumbs-down is saved at once and a comment box opens.
    box = answer.get_by_role("textbox", name="Comment on this answer")
    expect(box).to_be_focused(timeout=TIMEOUT)
    expect(group.get_by_role("button", name="Remove your thumbs down")).to_have_attribute("aria-pressed", "true")
    wait_until(lambda: AnswerFeedback.objects.filter(message=saved, rating="down").exists(), what="the rating")
    box.fill(COMMENT)
    answer.get_by_role("button", name="Send feedback").click()
    expect(box).to_have_count(0, timeout=TIMEOUT)
    wait_until(lambda: AnswerFeedback.objects.filter(message=saved, comment=COMMENT).exists(), what="the comment")

    chat.reload()
    answer = chat.last_answer()
    group = answer.get_by_role("group", name="Rate this answer")
    expect(group.get_by_role("button", name="Remove your thumbs down")).to_have_attribute("aria-pressed", "true")
    expect(group.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "false")
    # The comment is there to edit.
    group.get_by_role("button", name="Edit your comment").click()
    expect(answer.get_by_role("textbox", name="Comment on this answer")).to_have_value(COMMENT)
    answer.get_by_role("button", name="Cancel").click()

    # Changed to thumbs up (the comment stays), then withdrawn by pressing it again.
    group.get_by_role("button", name="Good answer").click()
    expect(group.get_by_role("button", name="Remove your thumbs up")).to_have_attribute("aria-pressed", "true")
    wait_until(
        lambda: AnswerFeedback.objects.filter(message=saved, rating="up", comment=COMMENT).exists(),
        what="the changed rating",
    )
    group.get_by_role("button", name="Remove your thumbs up").click()
    expect(group.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "false")
    wait_until(lambda: not AnswerFeedback.objects.exists(), what="the rating to be withdrawn")
    chat.reload()
    expect(chat.last_answer().get_by_role("button", name="Bad answer")).to_have_attribute("aria-pressed", "false")


def test_a_streamed_answer_can_be_rated_once_it_has_finished(open_chat):
    chat = open_chat("/")
    answer = chat.send("Rate me when I am done, please.")
    chat.wait_for_status(answer, "completed")
    answer.get_by_role("button", name="Good answer").click()
    expect(answer.get_by_role("button", name="Remove your thumbs up")).to_have_attribute("aria-pressed", "true")
    wait_until(
        lambda: AnswerFeedback.objects.filter(message_id=chat.message_id(answer), rating="up").exists(),
        what="the rating",
    )


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("size, viewport", [("desktop", DESKTOP), ("phone", PHONE)])
def test_the_rating_row_looks_right(open_chat, rated_chat, screenshot_dir, theme, size, viewport):
    conversation, _ = rated_chat
    chat = open_chat(f"/c/{conversation.pk}/", viewport=viewport, theme=theme)
    answer = chat.last_answer()
    answer.get_by_role("button", name="Bad answer").click()
    box = answer.get_by_role("textbox", name="Comment on this answer")
    expect(box).to_be_focused(timeout=TIMEOUT)
    box.fill(COMMENT)
    # Nothing sticks out sideways; the thumbs and the box are inside the answer's column.
    assert chat.page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
    column = answer.locator(".msg-main").bounding_box()
    for part in (answer.get_by_role("group", name="Rate this answer"), answer.locator(".feedback-form")):
        box_of = part.bounding_box()
        assert box_of["x"] >= column["x"] - 1 and box_of["x"] + box_of["width"] <= column["x"] + column["width"] + 1
    answer.locator(".feedback-form").scroll_into_view_if_needed()
    chat.page.screenshot(path=str(screenshot_dir / f"feedback-{size}-{theme}.png"))

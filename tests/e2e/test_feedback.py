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


# ---- the forms open above the composer (issue 25, item 6) -----------------------------------------------
# The thumbs-down comment form and the report form open under the answer. Under the last answer that is the
# very end of the thread, right above the message box: all of the form, its buttons too, must show above it
# (and above the box's fade), however the room for the thread changes while it is open.


@pytest.fixture
def long_chat(chat_user):
    """A conversation of three long answers: the last one's forms open at the very end of the thread."""
    conversation = conversation_for(chat_user, title="Long answers")
    parent = None
    for n in range(3):
        _, parent = exchange(conversation, f"{QUESTION} ({n + 1})", ANSWER, parent=parent)
    return conversation


def open_form(answer, which):
    """Open the thumbs-down comment form or the report form of `answer`: the form, its box, its buttons."""
    if which == "feedback":
        answer.get_by_role("button", name="Bad answer").click()
        form = answer.get_by_role("form", name="Feedback on this answer")
        box = form.get_by_role("textbox", name="Comment on this answer")
        buttons = [form.get_by_role("button", name="Skip"), form.get_by_role("button", name="Send feedback")]
    else:
        answer.get_by_role("button", name="Report this answer").click()
        form = answer.get_by_role("form", name="Report this answer")
        box = form.get_by_role("textbox", name="Why are you reporting this answer?")
        buttons = [form.get_by_role("button", name="Cancel"), form.get_by_role("button", name="Report to staff")]
    expect(box).to_be_focused(timeout=TIMEOUT)
    return form, box, buttons


def assert_above_the_composer(chat, form, buttons):
    """All of the form is on screen, and its buttons are above the message box and the fade over its top."""
    expect(form).to_be_in_viewport(ratio=1)
    composer_top = chat.page.locator("#composer").bounding_box()["y"]
    fade = chat.page.evaluate(
        "parseFloat(getComputedStyle(document.getElementById('composer'), '::before').height) || 0"
    )
    for button in buttons:
        expect(button).to_be_in_viewport(ratio=1)
        box = button.bounding_box()
        bottom = box["y"] + box["height"]
        assert bottom <= composer_top - fade, (
            f"{button} ends at {bottom:.0f} px; the composer (its fade) at {composer_top - fade:.0f} px"
        )


def shrink(chat, by):
    """The page loses `by` pixels of height, as when a phone's keyboard opens (or a window is made shorter)."""
    size = chat.page.viewport_size
    chat.page.set_viewport_size({"width": size["width"], "height": size["height"] - by})


@pytest.mark.parametrize("which", ["feedback", "report"])
@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("size, viewport", [("desktop", DESKTOP), ("phone", PHONE)])
def test_the_forms_under_the_last_answer_open_above_the_composer(
    open_chat, long_chat, screenshot_dir, which, theme, size, viewport
):
    chat = open_chat(f"/c/{long_chat.pk}/", viewport=viewport, theme=theme)
    form, box, buttons = open_form(chat.last_answer(), which)
    assert_above_the_composer(chat, form, buttons)
    chat.page.screenshot(path=str(screenshot_dir / f"{which}-form-{size}-{theme}.png"))
    # Less room while it is open (a phone's keyboard, a shorter window): the form moves up with the composer.
    shrink(chat, 300)
    expect(box).to_be_focused()
    assert_above_the_composer(chat, form, buttons)


@pytest.mark.parametrize("which", ["feedback", "report"])
@pytest.mark.parametrize("size, viewport", [("desktop", DESKTOP), ("phone", PHONE)])
def test_the_forms_under_a_first_answer_that_just_fits_open_above_the_composer(
    open_chat, chat_user, which, size, viewport
):
    """A new chat's one answer that ends just above the composer: the form is taller than the room left."""
    conversation = conversation_for(chat_user, title="One answer")
    exchange(conversation, QUESTION, ANSWER)
    chat = open_chat(f"/c/{conversation.pk}/", viewport=viewport)
    expect(chat.last_answer().get_by_role("group", name="Rate this answer")).to_be_visible()
    # Make the window just tall enough for the whole conversation, with 80 px to spare.
    spare = chat.page.evaluate(
        "(() => { const s = document.getElementById('messages'); return s.clientHeight - s.scrollHeight; })()"
    )
    shrink(chat, spare - 80)
    form, _, buttons = open_form(chat.last_answer(), which)
    assert_above_the_composer(chat, form, buttons)


@pytest.mark.parametrize("size, viewport", [("desktop", DESKTOP), ("phone", PHONE)])
def test_an_answer_streaming_below_does_not_pull_an_open_form_away(open_chat, long_chat, size, viewport):
    """The page follows a streaming answer while the reader is at the bottom; not once they write in a form
    on the answer before it (which they could reach without scrolling)."""
    chat = open_chat(f"/c/{long_chat.pk}/", viewport=viewport)
    expect(chat.answers()).to_have_count(3)
    rated = chat.answers().nth(2)  # the last one before the question below
    # The engine echoes the question: as headings, the answer is twice as tall as the question's bubble.
    streaming = chat.send("\n".join(f"# Part {n} of the plan" for n in range(1, 13)))
    chat.wait_for_answer_text(streaming, 0)
    form, box, buttons = open_form(rated, "feedback")
    assert_above_the_composer(chat, form, buttons)
    chat.wait_for_status(streaming, "completed")
    expect(box).to_be_focused()
    assert_above_the_composer(chat, form, buttons)

"""Continue, as a person sees it: an answer cut at its length limit says so and offers to go on; one
click writes on from where it stopped, in a new version of the answer, on a desktop and on a phone."""

import pytest
from playwright.sync_api import expect

from chat.models import Message
from tests.e2e.chatpage import ANSWER_TIMEOUT, TIMEOUT, words
from tests.e2e.conftest import DESKTOP, PHONE
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.e2e

# The engine echoes the question; the plan's answers are 12 tokens, so this one takes three of them.
QUESTION = (
    "The keeper climbs the stairs at dusk, trims the wick of the great lamp, and watches the ships "
    "pass safely along the rocky coast through the long night, until the morning comes."
)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_an_answer_cut_at_its_length_limit_is_continued_to_its_end(open_chat, chat_user, viewport):
    put_on_plan(chat_user, "pro", max_output_tokens=12)
    chat = open_chat(viewport=viewport)
    page = chat.page

    answer = chat.send(QUESTION)
    chat.wait_for_status(answer, "completed")
    cut = chat.answer_text(answer)
    assert QUESTION.startswith(words(cut)) and words(cut) != QUESTION
    expect(answer.get_by_text("This answer reached its length limit.")).to_be_visible()

    versions, shown = 1, cut
    while chat.last_answer().get_by_role("button", name="Continue", exact=True).count():
        assert versions < 8, "the question is about three answers long"
        button = chat.last_answer().get_by_role("button", name="Continue", exact=True)
        button.scroll_into_view_if_needed()
        expect(button).to_be_in_viewport()
        button.click()
        versions += 1
        expect(page.get_by_role("group", name=f"Version {versions} of {versions}")).to_be_visible(timeout=TIMEOUT)
        chat.wait_for_status(chat.last_answer(), "completed", timeout=ANSWER_TIMEOUT)
        longer = words(chat.answer_text(chat.last_answer()))
        assert longer.startswith(words(shown)) and len(longer) > len(words(shown))  # went on where it stopped
        shown = longer

    whole = chat.last_answer()
    assert versions >= 3 and words(chat.answer_text(whole)) == QUESTION  # the whole answer, as one text
    expect(whole.get_by_text("This answer reached its length limit.")).to_be_hidden()
    assert Message.objects.filter(role="assistant").count() == versions

    # The cut versions stay as they were; the first still says why it stopped, without the button
    # (only the answer at the end of the chat offers it).
    for shown_version in range(versions - 1, 0, -1):  # each click once the one before it has been drawn
        page.get_by_role("button", name="Previous version").click()
        expect(page.get_by_role("group", name=f"Version {shown_version} of {versions}")).to_be_visible(timeout=TIMEOUT)
    first = chat.last_answer()
    expect(first.get_by_text("This answer reached its length limit.")).to_be_visible()
    assert words(chat.answer_text(first)) == words(cut)

    chat.open(f"/c/{chat.conversation_id()}/")  # the chat opened anew shows the newest version: the whole answer
    expect(page.get_by_role("group", name=f"Version {versions} of {versions}")).to_be_visible(timeout=TIMEOUT)
    assert words(chat.answer_text(chat.last_answer())) == QUESTION

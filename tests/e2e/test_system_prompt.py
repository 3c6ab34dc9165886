"""A chat's own system prompt on the chat page (issue 25, item 6): saving or removing it is confirmed, and
the header shows a sign while the open chat has one ("System prompt", a button that opens it; only its
icon on a phone). The sign follows the chat on screen: set, cleared, another chat opened, a new chat.
Screenshots go to a temporary directory, or to docs/screenshots/ with E2E_SCREENSHOTS=1."""

import pytest
from playwright.sync_api import expect

from chat.models import Conversation
from tests.chat.factories import conversation_for, exchange
from tests.e2e.chatpage import TIMEOUT, wait_until
from tests.e2e.conftest import DESKTOP, PHONE

pytestmark = pytest.mark.e2e

TUTOR = "You are a patient maths tutor. Ask one question at a time."
LONG_TITLE = "Boiling points of the alcohols, from methanol to octanol, and why they rise"


def sign(chat):
    """The header's sign that the open chat has its own system prompt."""
    return chat.page.locator(".convo-bar").get_by_role("button", name="System prompt", exact=True)


def dialog_for(chat, title):
    return chat.page.get_by_role("dialog", name=f"System prompt for “{title}”")


def open_chat_titled(chat, title):
    chat.conversation_item(title).get_by_role("link").click()
    expect(chat.page.locator("#convo-title")).to_have_text(title, timeout=TIMEOUT)


def save(chat, title, text, confirmation):
    """Write `text` in the open dialog and save it: the dialog says so, then closes."""
    dialog = dialog_for(chat, title)
    box = dialog.get_by_role("textbox", name="System prompt")
    expect(box).to_be_enabled()
    box.fill(text)
    dialog.get_by_role("button", name="Save").click()
    expect(dialog.get_by_role("status")).to_have_text(confirmation)
    expect(dialog).to_be_hidden()


@pytest.fixture
def two_chats(chat_user):
    """ "Tutor" without a system prompt, "Brief" with one."""
    tutor = conversation_for(chat_user, title="Tutor", system_prompt="")
    exchange(tutor, "What is 2+2?", "4")
    brief = conversation_for(chat_user, title="Brief", system_prompt="Be brief.")
    exchange(brief, "Water?", "100 degrees.")
    return tutor, brief


def test_saving_and_removing_a_chats_system_prompt_is_confirmed_and_the_header_shows_it(
    open_chat, two_chats, screenshot_dir
):
    tutor, _ = two_chats
    chat = open_chat(f"/c/{tutor.pk}/", viewport=DESKTOP)
    expect(chat.page.locator("#convo-title")).to_have_text("Tutor")
    expect(sign(chat)).to_be_hidden()

    # Set from the chat's menu in the sidebar: confirmed, and the header shows the sign.
    chat.conversation_item("Tutor").hover()
    chat.conversation_item("Tutor").get_by_role("button", name="Options for Tutor").click()
    chat.page.get_by_role("menuitem", name="System prompt").click()
    save(chat, "Tutor", TUTOR, "System prompt saved for this chat.")
    wait_until(lambda: Conversation.objects.get(pk=tutor.pk).system_prompt == TUTOR, what="the prompt saved")
    expect(sign(chat)).to_be_visible()
    expect(sign(chat)).to_have_text("System prompt")
    expect(sign(chat)).to_have_attribute("title", "This chat has its own system prompt. Open it to read or change it.")

    # The sign follows the chat on screen.
    open_chat_titled(chat, "Brief")
    expect(sign(chat)).to_be_visible()
    chat.page.screenshot(path=str(screenshot_dir / "system-prompt-sign-desktop-light.png"))
    chat.page.get_by_role("button", name="New chat").click()
    expect(chat.page.locator("#convo-title")).to_have_text("New chat")
    expect(sign(chat)).to_be_hidden()
    open_chat_titled(chat, "Tutor")
    expect(sign(chat)).to_be_visible()
    # A new answer does not lose it (a turn's conversation carries no prompt, only whether there is one).
    answer = chat.send("What is 3+3?")
    chat.wait_for_status(answer, "completed")
    expect(sign(chat)).to_be_visible()

    # The sign opens the prompt; removing it is confirmed, and the sign goes.
    sign(chat).click()
    expect(dialog_for(chat, "Tutor").get_by_role("textbox", name="System prompt")).to_have_value(TUTOR)
    save(chat, "Tutor", "", "System prompt removed.")
    wait_until(lambda: Conversation.objects.get(pk=tutor.pk).system_prompt == "", what="the prompt removed")
    expect(sign(chat)).to_be_hidden()
    expect(chat.prompt).to_be_focused()  # the sign the dialog came from is gone: the message box
    open_chat_titled(chat, "Brief")
    expect(sign(chat)).to_be_visible()
    open_chat_titled(chat, "Tutor")
    expect(sign(chat)).to_be_hidden()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_on_a_phone_the_sign_is_an_icon_that_leaves_the_title_room(open_chat, chat_user, screenshot_dir, theme):
    conversation = conversation_for(chat_user, title=LONG_TITLE, system_prompt="Be brief.")
    exchange(conversation, "Water?", "100 degrees.")
    chat = open_chat(f"/c/{conversation.pk}/", viewport=PHONE, theme=theme)
    button = sign(chat)
    expect(button).to_be_visible()
    expect(button).to_have_attribute("title", "This chat has its own system prompt. Open it to read or change it.")
    expect(button.get_by_text("System prompt")).to_be_hidden()  # the icon alone
    assert button.bounding_box()["width"] <= 40
    # One row, nothing off the side; the title keeps most of it and the picker stays whole.
    assert chat.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    bar = chat.page.locator(".convo-bar").bounding_box()
    title = chat.page.locator("#convo-title").bounding_box()
    picker = chat.page.locator("#model-picker").bounding_box()
    mark = button.bounding_box()
    assert title["width"] >= 100
    assert title["x"] + title["width"] <= mark["x"] and mark["x"] + mark["width"] <= picker["x"]
    assert picker["x"] + picker["width"] <= bar["x"] + bar["width"]
    for box in (title, mark, picker):
        assert bar["y"] <= box["y"] and box["y"] + box["height"] <= bar["y"] + bar["height"]
    chat.page.screenshot(path=str(screenshot_dir / f"system-prompt-sign-phone-{theme}.png"))

    button.click()
    save(chat, LONG_TITLE, "", "System prompt removed.")
    expect(sign(chat)).to_be_hidden()

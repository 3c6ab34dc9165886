"""Settings, custom instructions, a chat's own system prompt, archive, and the shortcuts, in a browser.

The engine is the simulated SGLang worker; it counts the prompt it receives with its own tokenizer,
so the answer's prompt_tokens tells exactly which system messages reached it."""

import re

import pytest
from django.conf import settings
from playwright.sync_api import expect

from accounts.models import User
from chat.models import Conversation, Message
from inference.chat_templates import render_chatml
from simulator import tokenizer as tok
from tests.chat.factories import conversation_for, exchange
from tests.e2e.chatpage import wait_until
from tests.e2e.conftest import DESKTOP, PHONE
from tests.e2e.test_account_pages import FITS_SIDEWAYS

pytestmark = pytest.mark.e2e

INSTRUCTIONS = "I am a chemist. Prefer SI units."


def _engine_tokens(messages: list[dict]) -> int:
    return len(tok.encode(render_chatml(messages)))


def test_settings_are_saved_and_the_theme_follows_them_everywhere(open_page, chat_user):
    page = open_page("/settings/", user=chat_user, theme="light")
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    page.get_by_label("Display name").fill("Ada Lovelace")
    page.locator("label.theme-choice", has_text="Dark").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")  # a preview before saving
    page.get_by_label("What should the assistant know").fill(INSTRUCTIONS)
    expect(page.locator("#custom_instructions-count")).to_contain_text(f"{len(INSTRUCTIONS)} /")
    page.get_by_role("button", name="Save settings").click()

    expect(page.get_by_text("Settings saved.")).to_be_visible()
    chat_user.refresh_from_db()
    assert (chat_user.display_name, chat_user.theme, chat_user.custom_instructions) == (
        "Ada Lovelace",
        "dark",
        INSTRUCTIONS,
    )

    # The saved setting wins over what this browser kept (the fixture stores "light" on every page).
    page.goto("/")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    expect(page.locator(".user-name")).to_have_text("Ada Lovelace")
    # The header's toggle switches and saves the setting, so the Settings page agrees.
    page.get_by_role("button", name="Light theme").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    wait_until(lambda: User.objects.get(pk=chat_user.pk).theme == "light", what="the toggle to save the theme")
    page.locator("a.user-settings").click()
    expect(page.get_by_role("radio", name="Light")).to_be_checked()


def test_instructions_and_the_chats_system_prompt_reach_the_engine_on_the_next_turn(open_chat, chat_user):
    User.objects.filter(pk=chat_user.pk).update(custom_instructions=INSTRUCTIONS)
    conversation = conversation_for(chat_user, title="Boiling points", system_prompt="")
    exchange(conversation, "Water?", "100 degrees.")
    chat = open_chat(f"/c/{conversation.pk}/")

    chat.conversation_item("Boiling points").hover()
    chat.conversation_item("Boiling points").get_by_role("button", name="Options for Boiling points").click()
    chat.page.get_by_role("menuitem", name="System prompt").click()
    dialog = chat.page.get_by_role("dialog", name="System prompt for “Boiling points”")
    box = dialog.get_by_label("System prompt")
    expect(box).to_be_enabled()
    # The longest prompt is the server's (CHAT_MAX_SYSTEM_PROMPT_CHARS, from the page's bootstrap).
    expect(box).to_have_attribute("maxlength", str(settings.CHAT_MAX_SYSTEM_PROMPT_CHARS))
    box.fill("Answer in one sentence.")
    expect(dialog.locator(".prompt-count")).to_have_text(f"23 / {settings.CHAT_MAX_SYSTEM_PROMPT_CHARS:,}")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    wait_until(
        lambda: Conversation.objects.get(pk=conversation.pk).system_prompt == "Answer in one sentence.",
        what="the system prompt to be saved",
    )

    answer = chat.send("Ethanol?")
    chat.wait_for_status(answer, "completed")
    sent = Message.objects.get(pk=chat.message_id(answer))
    assert sent.prompt_tokens == _engine_tokens(
        [
            {"role": "system", "content": settings.CHAT_DEFAULT_SYSTEM_PROMPT},
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "system", "content": "Answer in one sentence."},
            {"role": "user", "content": "Water?"},
            {"role": "assistant", "content": "100 degrees."},
            {"role": "user", "content": "Ethanol?"},
        ]
    )


def test_archive_and_unarchive_from_the_menu_on_a_phone(open_chat, chat_user):
    conversation_for(chat_user, title="Keep me")
    old = conversation_for(chat_user, title="Put me away")
    chat = open_chat("/", viewport=PHONE)
    chat.page.get_by_role("button", name="Show conversations").click()
    item = chat.conversation_item("Put me away")
    item.get_by_role("button", name="Options for Put me away").click()
    chat.page.get_by_role("menuitem", name="Archive").click()
    expect(item).to_have_count(0)
    expect(chat.conversation_item("Keep me")).to_be_visible()
    wait_until(lambda: Conversation.objects.get(pk=old.pk).archived, what="the chat to be archived")

    chat.page.get_by_role("button", name="Archived chats").click()
    expect(chat.conversation_item("Keep me")).to_have_count(0)
    archived = chat.conversation_item("Put me away")
    expect(archived).to_be_visible()
    assert chat.page.evaluate(FITS_SIDEWAYS)["scrollWidth"] <= PHONE["width"]
    archived.locator(".conv-link").click()
    expect(chat.page.locator("#convo-archived")).to_be_visible()
    expect(chat.questions()).to_have_count(0)

    chat.page.get_by_role("button", name="Show conversations").click()
    archived.get_by_role("button", name="Options for Put me away").click()
    chat.page.get_by_role("menuitem", name="Unarchive").click()
    expect(archived).to_have_count(0)
    expect(chat.page.locator("#convo-archived")).to_be_hidden()
    chat.page.get_by_role("button", name="Back to chats").click()
    expect(chat.conversation_item("Put me away")).to_be_visible()


def test_question_mark_opens_the_shortcuts_but_types_in_the_composer(open_chat):
    chat = open_chat("/", viewport=DESKTOP)
    chat.prompt.fill("")
    chat.prompt.press("?")
    expect(chat.prompt).to_have_value("?")
    dialog = chat.page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_hidden()
    chat.page.locator("#messages").focus()
    chat.page.keyboard.press("?")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("row")).to_have_count(13)  # a header and twelve shortcuts
    chat.page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_shortcuts_people_know_from_chatgpt_work(open_chat, viewport):
    chat = open_chat("/", viewport=viewport)
    page = chat.page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    for text in ("The first question.", "The second question, whose answer is copied."):
        answer = chat.send(text)
        assert chat.wait_for_status(answer, "completed") == "completed"
    page.locator("#messages").focus()

    # Ctrl+Shift+C: the last answer, as written, on the clipboard; said to a screen reader too.
    page.keyboard.press("Control+Shift+C")
    expect(page.locator("#announcer")).to_have_text("Last answer copied.")
    assert page.evaluate("navigator.clipboard.readText()").strip() == "The second question, whose answer is copied."

    # Ctrl+K: the search box, in the drawer on a phone.
    page.keyboard.press("Control+K")
    search = page.locator("#conv-search")
    expect(search).to_be_focused()
    expect(search).to_be_in_viewport()
    # Shift+Esc: back to the message box (the drawer closes on a phone).
    page.keyboard.press("Shift+Escape")
    expect(chat.prompt).to_be_focused()
    expect(chat.prompt).to_be_in_viewport()

    # Ctrl+Shift+O: a new chat, empty, ready to type in.
    page.keyboard.press("Control+Shift+O")
    expect(page).to_have_url(re.compile(r"/$"))
    expect(chat.answers()).to_have_count(0)
    expect(chat.prompt).to_be_focused()


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize(("device", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_settings_page_fits_and_screenshots(open_page, chat_user, screenshot_dir, theme, device, viewport):
    User.objects.filter(pk=chat_user.pk).update(theme=theme, custom_instructions=INSTRUCTIONS)
    page = open_page("/settings/", user=chat_user, viewport=viewport, theme="light")
    expect(page.locator("html")).to_have_attribute("data-theme", theme)
    expect(page.get_by_role("heading", name="Keyboard shortcuts")).to_be_visible()
    fit = page.evaluate(FITS_SIDEWAYS)
    assert fit["scrollWidth"] <= viewport["width"] and not fit["sticking"], fit
    page.screenshot(path=screenshot_dir / f"settings-{device}-{theme}.png", full_page=True)

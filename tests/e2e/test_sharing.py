"""Sharing a conversation from its menu and reading the link signed out; the account's data export.

Screenshots of the shared page (light and dark, desktop and phone) and of the share dialog go to a
temporary directory, or to docs/screenshots/ with E2E_SCREENSHOTS=1 (see test_screenshots.py).
"""

import io
import json
import re
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from chat.models import SharedConversation
from chat.sharing import services as sharing
from tests.chat.factories import conversation_for, exchange, say
from tests.e2e.chatpage import TIMEOUT
from tests.e2e.conftest import DESKTOP, PHONE
from tests.e2e.test_safety import DANGEROUS, MORE, PAYLOAD
from tests.e2e.test_screenshots import ANSWER, MATH_ANSWER, MATH_QUESTION, QUESTION

pytestmark = pytest.mark.e2e

TITLE = "Prefix caching in SGLang"


@pytest.fixture
def showcase(chat_user):
    conversation = conversation_for(chat_user, title=TITLE)
    _question, answer = exchange(conversation, QUESTION, ANSWER)
    exchange(
        conversation,
        "And how large should the cache be?",
        "Large enough to hold the **system prompt** and the recent turns of every active chat.",
        parent=answer,
    )
    return conversation


def open_share_dialog(chat, title):
    chat.sidebar.get_by_role("button", name=f"Options for {title}").click()
    chat.page.get_by_role("menuitem", name="Share").click()
    dialog = chat.page.get_by_role("dialog", name=f"Share “{title}”")
    expect(dialog).to_be_visible()
    return dialog


def wait_for_conversation(chat):
    """The conversation is on screen (opening it closes the phone's slide-over when it lands)."""
    expect(chat.answers().first).to_be_visible(timeout=TIMEOUT)


def read_signed_out(open_chat, url, **options):
    """A fresh browser with no session opens the link; returns the page and the HTTP status."""
    reader = open_chat(None, signed_in=False, **options)
    response = reader.page.goto(url)
    return reader, response.status


def test_share_from_the_menu_read_it_signed_out_then_revoke_it(open_chat, showcase):
    chat = open_chat(f"/c/{showcase.pk}/")
    chat.page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    wait_for_conversation(chat)

    dialog = open_share_dialog(chat, TITLE)
    expect(dialog.get_by_role("radio", name=re.compile("^Snapshot"))).to_be_checked()
    expect(dialog.get_by_role("checkbox", name="Show my name (Ada)")).not_to_be_checked()
    passages = dialog.get_by_role("checkbox", name=re.compile("^Show the quoted passages from your files"))
    expect(passages).not_to_be_checked()  # off unless the owner chooses
    dialog.get_by_role("button", name="Create link").click()
    link = dialog.get_by_role("textbox", name="Link to this chat")
    expect(link).to_have_value(re.compile(r"^http://127\.0\.0\.1:\d+/s/[A-Za-z0-9_-]{32}/$"), timeout=TIMEOUT)
    url = link.input_value()
    assert SharedConversation.objects.get().token in url
    expect(dialog.get_by_role("status")).to_have_text("Link created. Copy it and send it to anyone.")

    dialog.get_by_role("button", name="Copy link").click()
    expect(dialog.get_by_role("button", name="Copied")).to_be_visible()
    assert chat.page.evaluate("navigator.clipboard.readText()") == url
    chat.page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    expect(chat.sidebar.get_by_role("button", name=f"Options for {TITLE}")).to_be_focused()

    # Someone signed out opens it: the conversation, rendered as it is in the chat, and no owner.
    reader, status = read_signed_out(open_chat, url)
    assert status == 200
    reader.wait_ready()
    page = reader.page
    expect(page.get_by_role("heading", name=TITLE, level=1)).to_be_visible()
    expect(page.locator("#thread article.msg-user")).to_have_count(2)
    expect(page.locator("#thread article.msg-assistant")).to_have_count(2)
    expect(page.locator("#thread .md .code-block")).to_be_visible()
    expect(page.locator("#thread .md strong", has_text="Prefix caching")).to_be_visible()
    expect(page.locator("#thread .md table")).to_be_visible()
    expect(page.get_by_text("Shared by")).to_have_count(0)
    assert "ada@example.com" not in page.content()
    expect(page.get_by_role("link", name="Sign up").first).to_be_visible()

    # The owner goes live and chooses to be named; the same link follows.
    dialog = open_share_dialog(chat, TITLE)
    expect(link).to_have_value(url)
    dialog.get_by_role("radio", name=re.compile("^Live")).check()
    dialog.get_by_role("checkbox", name="Show my name (Ada)").check()
    passages.check()
    dialog.get_by_role("button", name="Update link").click()
    expect(dialog.get_by_role("status")).to_have_text("Link updated.")
    assert SharedConversation.objects.get().show_passages
    expect(link).to_have_value(url)
    page.reload()
    expect(page.get_by_test_id("shared-meta")).to_contain_text("Shared by Ada")
    expect(page.get_by_test_id("shared-meta")).to_contain_text("Live")

    # Revoked: the link stops working at once.
    dialog.get_by_role("button", name="Revoke link").click()
    expect(dialog.get_by_role("status")).to_have_text("Link revoked. It no longer works.")
    expect(dialog.get_by_role("button", name="Create link")).to_be_visible()
    expect(link).to_be_hidden()
    assert page.reload().status == 404
    expect(page.get_by_role("heading", name="Link not available")).to_be_visible()
    expect(page.get_by_text(TITLE)).to_have_count(0)


def test_a_snapshot_shares_the_branch_on_screen(open_chat, chat_user):
    conversation = conversation_for(chat_user, title="Two takes")
    question, first = exchange(conversation, "Name a colour.", "Blue, the first take.")
    say(conversation, "assistant", "Green, the second take.", parent=question)
    # The older answer is on screen (as after clicking "Previous version").
    chat = open_chat(f"/c/{conversation.pk}/?leaf={first.pk}")
    expect(chat.answers().first).to_contain_text("Blue, the first take.")

    dialog = open_share_dialog(chat, "Two takes")
    dialog.get_by_role("button", name="Create link").click()
    link = dialog.get_by_role("textbox", name="Link to this chat")
    expect(link).to_have_value(re.compile("/s/"), timeout=TIMEOUT)

    reader, status = read_signed_out(open_chat, link.input_value())
    assert status == 200
    reader.wait_ready()
    expect(reader.page.locator("#thread")).to_contain_text("Blue, the first take.")
    expect(reader.page.locator("#thread")).not_to_contain_text("Green")


@pytest.mark.hostile_content
def test_hostile_text_in_a_shared_conversation_is_rendered_inert(open_chat, chat_user):
    conversation = conversation_for(chat_user, title="Payloads <b onmouseover=alert(9)>x</b>")
    parent = None
    for text in (PAYLOAD, MORE):
        _, parent = exchange(conversation, text, text, parent=parent)
    link, _ = sharing.share_conversation(chat_user, conversation.pk)

    reader, status = read_signed_out(open_chat, f"/s/{link.token}/")
    assert status == 200
    reader.wait_ready()
    page = reader.page
    answer = page.locator("#thread article.msg-assistant").first
    # Questions are shown as typed; answers as sanitized markdown.
    expect(page.locator("#thread article.msg-user .bubble").first).to_have_text(PAYLOAD)
    click = answer.locator(".md a", has_text="click")
    expect(click).to_have_count(1)
    assert click.get_attribute("href") is None
    docs = answer.locator(".md a", has_text="docs")
    expect(docs).to_have_attribute("href", "https://example.com/docs")
    expect(docs).to_have_attribute("rel", "noopener noreferrer")
    assert page.evaluate(DANGEROUS) == []
    expect(page.locator("a[href^='javascript:' i]")).to_have_count(0)
    expect(page.get_by_role("heading", level=1)).to_have_text("Payloads <b onmouseover=alert(9)>x</b>")

    url = page.url
    click.click()
    page.locator("#thread article.msg-assistant").nth(1).locator(".md a", has_text="mixed").click()
    page.locator("#thread article.msg-assistant").nth(1).get_by_text("bold").hover()
    expect(page).to_have_url(url)
    assert reader.dialogs == [], reader.dialogs


def test_the_account_area_downloads_all_my_data(open_chat, showcase):
    page = open_chat(None).page
    page.goto("/accounts/email/")
    page.get_by_role("navigation", name="Account settings").get_by_role("link", name="Your data").click()
    expect(page.get_by_role("heading", name="Your data")).to_be_visible()

    with page.expect_download() as download:
        page.get_by_role("button", name="Download my data").click()
    assert re.fullmatch(r"sglchat-data-\d{4}-\d{2}-\d{2}\.zip", download.value.suggested_filename)
    with zipfile.ZipFile(io.BytesIO(Path(download.value.path()).read_bytes())) as archive:
        names = archive.namelist()
        conversation = next(
            n for n in names if n.endswith(f"/conversations/{showcase.pk}-prefix-caching-in-sglang.json")
        )
        data = json.loads(archive.read(conversation))
    assert data["conversation"]["title"] == TITLE
    assert len(data["messages"]) == 4


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize(("device", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_screenshots_shared_page(open_chat, showcase, chat_user, screenshot_dir, device, viewport, theme):
    link, _ = sharing.share_conversation(chat_user, showcase.pk, show_owner_name=True)
    reader, status = read_signed_out(open_chat, f"/s/{link.token}/", viewport=viewport, theme=theme)
    assert status == 200
    reader.wait_ready()
    expect(reader.page.locator("#thread .md .code-block")).to_be_visible()
    reader.page.screenshot(path=screenshot_dir / f"shared-{device}-{theme}.png")


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize(("device", "viewport"), [("desktop", DESKTOP), ("phone", PHONE)])
def test_screenshots_share_dialog(open_chat, showcase, screenshot_dir, device, viewport, theme):
    chat = open_chat(f"/c/{showcase.pk}/", viewport=viewport, theme=theme)
    wait_for_conversation(chat)
    if device == "phone":
        chat.page.get_by_role("button", name="Show conversations").click()
    dialog = open_share_dialog(chat, TITLE)
    dialog.get_by_role("button", name="Create link").click()
    expect(dialog.get_by_role("textbox", name="Link to this chat")).to_have_value(re.compile("/s/"), timeout=TIMEOUT)
    chat.page.screenshot(path=screenshot_dir / f"share-dialog-{device}-{theme}.png")


def test_a_shared_answer_shows_its_math_and_aligned_table(open_chat, chat_user):
    conversation = conversation_for(chat_user, title="Compound interest")
    exchange(conversation, MATH_QUESTION, MATH_ANSWER)
    link, _ = sharing.share_conversation(chat_user, conversation.pk)

    reader, status = read_signed_out(open_chat, f"/s/{link.token}/", viewport=PHONE)
    assert status == 200
    answer = reader.page.locator("#thread article.msg-assistant").first
    expect(answer.locator(".md .katex")).to_have_count(10, timeout=TIMEOUT)
    expect(answer.locator(".md .katex-display")).to_have_count(1)
    balance = answer.locator(".md tbody td").nth(2)
    assert balance.evaluate("(td) => getComputedStyle(td).textAlign") == "right"

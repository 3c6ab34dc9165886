"""The product in the person's language: chosen from the browser's Accept-Language, changed in Settings,
and in a right-to-left language the layout mirrors, on a desktop and on a phone."""

import pytest
from playwright.sync_api import expect

from accounts.models import User
from tests.chat.factories import conversation_for, exchange
from tests.e2e.chatpage import TIMEOUT
from tests.e2e.conftest import DESKTOP, PHONE

pytestmark = pytest.mark.e2e

FITS_SIDEWAYS = "document.scrollingElement.scrollWidth <= window.innerWidth"


def box(locator) -> dict:
    found = locator.bounding_box()
    assert found is not None, f"{locator} is not on screen"
    return found


def test_in_arabic_the_chat_mirrors_on_a_desktop(open_chat, chat_user):
    User.objects.filter(pk=chat_user.pk).update(language="ar")
    conversation = conversation_for(chat_user, title="مرحبا")
    exchange(conversation, "مرحبا، كيف حالك؟", "بخير، شكرا لك.")
    chat = open_chat(f"/c/{conversation.pk}/", viewport=DESKTOP)
    page = chat.page

    expect(page.locator("html")).to_have_attribute("dir", "rtl")
    expect(page.locator("html")).to_have_attribute("lang", "ar")
    # The chats' list is on the right, the conversation on its left.
    sidebar, conversation_pane = box(page.locator("#sidebar, .sidebar").first), box(page.locator(".convo"))
    assert sidebar["x"] > conversation_pane["x"]
    # The person's own message sits on the left (the end side); the answer's text starts from the right.
    thread = box(page.locator("#thread"))
    question = box(chat.questions().first.locator(".bubble"))
    assert question["x"] - thread["x"] < (thread["x"] + thread["width"]) - (question["x"] + question["width"])
    paragraph = chat.answers().first.locator(".md p").first
    assert paragraph.evaluate("(p) => getComputedStyle(p).direction") == "rtl"
    assert page.evaluate(FITS_SIDEWAYS)


def test_in_arabic_the_phone_drawers_come_from_the_right(open_chat, chat_user):
    User.objects.filter(pk=chat_user.pk).update(language="ar")
    chat = open_chat("/", viewport=PHONE)
    page = chat.page
    expect(page.locator("html")).to_have_attribute("dir", "rtl")
    drawer = page.locator(".sidebar")
    expect(drawer).not_to_be_in_viewport()
    assert page.evaluate(FITS_SIDEWAYS)

    page.locator("#sidebar-toggle").click()
    # It comes to rest against the right edge (once its slide has ended).
    page.wait_for_function(
        "() => Math.abs(document.querySelector('.sidebar').getBoundingClientRect().right - window.innerWidth) <= 1",
        timeout=TIMEOUT,
    )
    expect(drawer).to_be_in_viewport(ratio=0.9)
    assert page.evaluate(FITS_SIDEWAYS)


def test_the_language_follows_the_browser_and_then_the_persons_own_choice(open_page, chat_user):
    """No choice of one's own: the browser's Accept-Language. Chosen in Settings: that one, whatever the
    browser says, on the next page and from then on."""
    page = open_page("/settings/", user=chat_user, viewport=PHONE, locale="de-DE")
    expect(page.locator("html")).to_have_attribute("lang", "de")
    page.locator("#language").select_option("ja")
    page.locator("form.settings-form button[type=submit]").last.click()
    expect(page.locator("html")).to_have_attribute("lang", "ja", timeout=TIMEOUT)
    expect(page.locator("#language")).to_have_value("ja")
    assert User.objects.get(pk=chat_user.pk).language == "ja"
    page.goto("/")
    expect(page.locator("html")).to_have_attribute("lang", "ja")
    # Back to the browser's.
    page.goto("/settings/")
    page.locator("#language").select_option("")
    page.locator("form.settings-form button[type=submit]").last.click()
    expect(page.locator("html")).to_have_attribute("lang", "de", timeout=TIMEOUT)

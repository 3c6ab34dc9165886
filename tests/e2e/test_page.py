"""The rest of the page: the sidebar, the keyboard, a phone, the model picker, code blocks,
contrast in both themes, and what makes it installable."""

import re
import struct
from pathlib import Path
from urllib.parse import urljoin

import pytest
from playwright.sync_api import expect

from chat.models import Conversation
from tests.chat.factories import conversation_for, exchange
from tests.e2e.chatpage import TIMEOUT, words
from tests.e2e.conftest import PHONE
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.e2e


@pytest.fixture
def history(chat_user):
    """A few conversations, as if the user had been here before (no engine involved)."""
    made = {}
    for title, question, answer in [
        ("Weekend trip to Lisbon", "Where should I eat?", "Try a pastel de nata in Belém."),
        ("SQL window functions", "What does OVER do?", "It defines the window a function sees."),
        ("Rust lifetimes", "Why 'a?", "It names how long a borrow lives."),
    ]:
        conversation = conversation_for(chat_user, title=title)
        exchange(conversation, question, answer)
        made[title] = conversation
    return made


def test_sidebar_searches_titles_and_text_renames_pins_and_deletes(open_chat, history):
    chat = open_chat()
    sidebar = chat.sidebar
    expect(sidebar.locator("li.conv-item")).to_have_count(3, timeout=TIMEOUT)

    search = sidebar.get_by_role("searchbox", name="Search conversations")
    search.fill("nata")  # only in a message's text
    expect(sidebar.locator("li.conv-item")).to_have_count(1, timeout=TIMEOUT)
    expect(chat.conversation_item("Weekend trip to Lisbon")).to_be_visible()
    search.fill("window")  # in a title
    expect(sidebar.locator("li.conv-item")).to_have_count(1, timeout=TIMEOUT)
    expect(chat.conversation_item("SQL window functions")).to_be_visible()
    search.fill("no such thing anywhere")
    expect(sidebar.get_by_text("No chats match")).to_be_visible(timeout=TIMEOUT)
    search.fill("")
    expect(sidebar.locator("li.conv-item")).to_have_count(3, timeout=TIMEOUT)

    # Open one: its messages are shown and the address names it.
    chat.conversation_item("Rust lifetimes").get_by_role("link").click()
    expect(chat.page).to_have_url(re.compile(rf"/c/{history['Rust lifetimes'].pk}/$"))
    expect(chat.answers().first).to_contain_text("how long a borrow lives")
    expect(chat.page.get_by_role("heading", name="Rust lifetimes", level=1)).to_be_visible()

    # Rename.
    sidebar.get_by_role("button", name="Options for Rust lifetimes").click()
    chat.page.get_by_role("menuitem", name="Rename").click()
    field = sidebar.get_by_role("textbox", name="New name for this chat")
    field.fill("Borrowing in Rust")
    field.press("Enter")
    expect(chat.conversation_item("Borrowing in Rust")).to_be_visible(timeout=TIMEOUT)
    expect(chat.page.get_by_role("heading", name="Borrowing in Rust", level=1)).to_be_visible()
    assert Conversation.objects.get(pk=history["Rust lifetimes"].pk).title == "Borrowing in Rust"

    # Export downloads the conversation.
    sidebar.get_by_role("button", name="Options for Borrowing in Rust").click()
    with chat.page.expect_download() as download:
        chat.page.get_by_role("menuitem", name="Export as Markdown").click()
    exported = Path(download.value.path()).read_text()
    assert "Why 'a?" in exported and "how long a borrow lives" in exported
    expect(chat.page.get_by_role("menu")).to_have_count(0)

    # Pin: it moves to the Pinned group, first.
    sidebar.get_by_role("button", name="Options for SQL window functions").click()
    chat.page.get_by_role("menuitem", name="Pin").click()
    pinned = sidebar.locator("ul.conv-group").first
    expect(sidebar.locator("h2.conv-group-title").first).to_have_text("Pinned", timeout=TIMEOUT)
    expect(pinned.locator("li.conv-item")).to_have_count(1)
    expect(pinned).to_contain_text("SQL window functions")
    assert Conversation.objects.get(pk=history["SQL window functions"].pk).pinned

    # Delete asks first; Cancel keeps it, Delete removes it (and leaves the page on a new chat).
    sidebar.get_by_role("button", name="Options for Borrowing in Rust").click()
    chat.page.get_by_role("menuitem", name="Delete").click()
    dialog = chat.page.get_by_role("dialog", name="Delete chat?")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert Conversation.objects.filter(pk=history["Rust lifetimes"].pk).exists()
    sidebar.get_by_role("button", name="Options for Borrowing in Rust").click()
    chat.page.get_by_role("menuitem", name="Delete").click()
    dialog.get_by_role("button", name="Delete").click()
    expect(chat.conversation_item("Borrowing in Rust")).to_have_count(0, timeout=TIMEOUT)
    expect(chat.page).to_have_url(f"{chat.base_url}/")
    assert not Conversation.objects.filter(pk=history["Rust lifetimes"].pk).exists()


def _focus_by_tab(chat, predicate_js: str, limit: int = 60) -> None:
    """Press Tab until the focused element satisfies `predicate_js` (a JS expression over `el`)."""
    for _ in range(limit):
        chat.page.keyboard.press("Tab")
        if chat.page.evaluate(f"(() => {{ const el = document.activeElement; return !!({predicate_js}); }})()"):
            return
    raise AssertionError(f"Tab never reached an element where {predicate_js}")


FOCUS_RING = """() => {
  const style = getComputedStyle(document.activeElement);
  return style.outlineStyle !== "none" && parseFloat(style.outlineWidth) >= 2;
}"""


def test_keyboard_alone_finds_a_chat_sends_newlines_stops_and_pins(open_chat, history):
    chat = open_chat()
    page = chat.page
    page.locator("body").focus()

    # Tab from the top: every stop shows a focus ring.
    _focus_by_tab(chat, "el.id === 'new-chat'")
    assert page.evaluate(FOCUS_RING)
    _focus_by_tab(chat, "el.id === 'conv-search'")
    page.keyboard.type("lisbon")
    expect(chat.sidebar.locator("li.conv-item")).to_have_count(1, timeout=TIMEOUT)
    _focus_by_tab(chat, "el.classList.contains('conv-link')")
    assert page.evaluate(FOCUS_RING)
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/c/{history['Weekend trip to Lisbon'].pk}/$"), timeout=TIMEOUT)

    # The options menu works with Enter and the arrow keys; Escape closes it.
    _focus_by_tab(chat, "el.classList.contains('conv-more')")
    page.keyboard.press("Enter")
    expect(page.get_by_role("menuitem", name="Rename")).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(page.get_by_role("menuitem", name="Pin")).to_be_focused()
    page.keyboard.press("Enter")
    expect(chat.sidebar.locator("h2.conv-group-title").first).to_have_text("Pinned", timeout=TIMEOUT)

    # Compose: Shift+Enter is a new line, Enter sends, Escape stops.
    _focus_by_tab(chat, "el.id === 'prompt'")
    page.keyboard.type("Line one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("line two " + "and more words to say " * 20)
    expect(chat.prompt).to_have_value(re.compile(r"^Line one\nline two"))
    expect(chat.answers()).to_have_count(1)
    page.keyboard.press("Enter")
    expect(chat.answers()).to_have_count(2, timeout=TIMEOUT)
    expect(chat.questions().last.locator(".bubble")).to_have_text(re.compile(r"^Line one\nline two"))
    answer = chat.last_answer()
    chat.wait_for_answer_text(answer, 20)
    page.keyboard.press("Escape")
    assert chat.wait_for_status(answer, "stopped", "completed") == "stopped"
    expect(chat.prompt).to_be_focused()


def test_on_a_phone_the_sidebar_slides_over_and_the_chat_fits(open_chat, history):
    chat = open_chat(viewport=PHONE)
    page = chat.page
    toggle = page.get_by_role("button", name="Show conversations")

    expect(chat.sidebar).not_to_be_in_viewport()
    expect(toggle).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    toggle.click()
    expect(chat.sidebar).to_be_in_viewport(ratio=0.9)
    expect(toggle).to_have_attribute("aria-expanded", "true")
    page.keyboard.press("Escape")
    expect(chat.sidebar).not_to_be_in_viewport()

    toggle.click()
    chat.conversation_item("SQL window functions").get_by_role("link").click()
    expect(chat.sidebar).not_to_be_in_viewport()
    expect(chat.answers().first).to_contain_text("the window a function sees")

    answer = chat.send("Small screens work too.")
    assert chat.wait_for_status(answer, "completed", "stopped", "failed") == "completed"
    assert words(chat.answer_text(answer)) == "Small screens work too."
    expect(chat.prompt).to_be_in_viewport()
    expect(chat.send_button).to_be_in_viewport()
    # Nothing sticks out sideways.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_the_model_picker_offers_only_what_the_plan_allows(open_chat, chat_user):
    chat = open_chat()
    picker = chat.page.get_by_role("combobox", name="Model")
    expect(picker).to_have_value("sim-small")
    large = picker.locator("option[value='sim-large']")
    expect(large).to_be_disabled()
    expect(large).to_contain_text("not included in the Free plan")

    put_on_plan(chat_user, "plus")
    chat.reload()
    expect(large).to_be_enabled()
    picker.select_option("sim-large")
    answer = chat.send("Which model?")
    chat.wait_for_status(answer, "completed", "stopped", "failed")
    expect(answer.locator(".msg-meta")).to_contain_text("sim-large")
    assert Conversation.objects.get(pk=chat.conversation_id()).model == "sim-large"


CODE = "def add(a, b):\n    return a + b"


def test_code_blocks_are_highlighted_and_copied(open_chat):
    chat = open_chat()
    chat.page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    answer = chat.send(f"Here:\n\n```python\n{CODE}\n```")
    chat.wait_for_status(answer, "completed", "stopped", "failed")

    block = answer.locator(".code-block")
    expect(block).to_have_count(1)
    expect(block.locator(".code-head")).to_contain_text("python")
    expect(block.locator(".hljs-keyword").first).to_have_text("def")
    button = block.locator("button.code-copy")
    expect(button).to_have_accessible_name("Copy python code")
    button.click()
    expect(button).to_have_text("Copied")  # and says so to screen readers, for a moment
    expect(button).to_have_accessible_name("Copied")
    assert chat.page.evaluate("navigator.clipboard.readText()") == CODE


# WCAG relative luminance and contrast of each visible text against the background behind it.
CONTRAST = """(selectors) => {
  const parse = (c) => c.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (let node = el; node; node = node.parentElement) {
      const c = parse(getComputedStyle(node).backgroundColor);
      if (c.length < 4 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const out = [];
  for (const selector of selectors) {
    const el = document.querySelector(selector);
    if (!el || !el.getClientRects().length) { out.push([selector, null]); continue; }
    const fg = lum(parse(getComputedStyle(el).color)), bg = lum(background(el));
    out.push([selector, (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05)]);
  }
  return out;
}"""

TEXTS = [
    ".site-header .brand",
    ".new-chat",
    "#conv-search",
    ".conv-group-title",
    ".conv-item.active .conv-title",
    ".conv-item:not(.active) .conv-title",
    ".user-name",
    ".user-plan",
    ".convo-title",
    ".prompt-sign",  # the chat has its own system prompt (the factory's)
    "#model-picker",
    ".sim-banner",
    ".bubble",
    ".md p",
    ".md a",
    ".md :not(pre) > code",
    ".code-head span",
    ".code-block pre",
    ".hljs-keyword",
    ".hljs-string",
    ".hljs-number",
    ".hljs-comment",
    ".hljs-title",
    ".msg-meta",
    ".composer-hint",
    "#prompt",
]


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_meets_wcag_aa_contrast_in_both_themes(open_chat, chat_user, theme):
    conversation_for(chat_user, title="Another chat")  # an inactive item in the sidebar
    conversation = conversation_for(chat_user, title="Contrast check", pinned=False)
    exchange(
        conversation,
        "Show me some code.",
        'A [link](https://example.com), `inline`, and:\n\n```python\n# comment\ndef f(n):\n    return "s" * 42\n```',
    )
    chat = open_chat(f"/c/{conversation.pk}/", theme=theme)
    expect(chat.page.locator("html")).to_have_attribute("data-theme", theme)
    expect(chat.answers().first.locator(".code-block")).to_be_visible()
    # The sidebar fills in from its own request; measure only once both conversations are listed.
    expect(chat.page.locator(".conv-item .conv-title")).to_have_count(2)
    expect(chat.page.locator(".conv-item.active")).to_have_count(1)

    ratios = dict(chat.page.evaluate(CONTRAST, TEXTS))
    missing = [s for s, r in ratios.items() if r is None]
    low = {s: round(r, 2) for s, r in ratios.items() if r is not None and r < 4.5}
    assert not missing, f"not on the page: {missing}"
    assert not low, f"below 4.5:1 in the {theme} theme: {low}"


def test_the_page_is_installable_as_an_app(open_chat):
    chat = open_chat()
    page = chat.page
    href = page.locator("link[rel='manifest']").get_attribute("href")
    expect(page.locator("meta[name='theme-color']")).to_have_attribute("content", re.compile(r"^#|^rgb"))
    response = page.request.get(href)
    assert response.ok
    manifest = response.json()
    assert manifest["display"] == "standalone" and manifest["start_url"] == "/"
    assert manifest["name"] and manifest["short_name"]
    sizes = {}
    for icon in manifest["icons"]:
        image = page.request.get(urljoin(urljoin(chat.base_url + "/", href), icon["src"]))
        assert image.ok and image.headers["content-type"] == "image/png"
        width, height = struct.unpack(">II", image.body()[16:24])  # the PNG IHDR
        assert f"{width}x{height}" == icon["sizes"]
        sizes[icon["sizes"]] = icon.get("purpose", "any")
    assert {"192x192", "512x512"} <= set(sizes)


def test_a_long_conversation_opens_at_its_newest_messages_and_shows_earlier_ones_on_request(open_chat, chat_user):
    conversation = conversation_for(chat_user, title="A very long talk")
    parent = None
    for n in range(65):  # 130 messages: more than one page
        _, parent = exchange(conversation, f"Question number {n}", f"Answer number {n}", parent=parent)

    chat = open_chat(f"/c/{conversation.pk}/")
    expect(chat.page.get_by_text("Answer number 64", exact=True)).to_be_visible(timeout=TIMEOUT)
    expect(chat.page.locator("article.msg")).to_have_count(100)
    earlier = chat.page.get_by_role("button", name="Show earlier messages")
    expect(chat.page.get_by_text("Question number 0", exact=True)).to_have_count(0)

    earlier.scroll_into_view_if_needed()
    oldest_shown = chat.page.get_by_text("Question number 15", exact=True)
    top_before = oldest_shown.bounding_box()["y"]
    earlier.click()

    expect(chat.page.locator("article.msg")).to_have_count(130)
    expect(chat.page.get_by_role("button", name="Show earlier messages")).to_have_count(0)
    expect(chat.page.get_by_text("Question number 0", exact=True)).to_be_attached()
    # The reader stays where they were: the message that was at the top has not jumped away.
    assert abs(oldest_shown.bounding_box()["y"] - top_before) < 80

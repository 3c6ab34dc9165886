"""Hostile text in a conversation stays text: markdown is sanitized, scripts never run.

The engine echoes the prompt, so the answer (rendered as markdown) carries the same payloads as
the question (shown as typed). Both must be inert.
"""

import pytest
from playwright.sync_api import expect

from chat.models import Message
from tests.e2e.chatpage import TIMEOUT

pytestmark = pytest.mark.e2e

PAYLOAD = "Look <img src=x onerror=alert(1)> then [click](javascript:alert(1)) and [docs](https://example.com/docs)"
MORE = (
    '<a href="javascript:alert(2)">raw link</a> <script>alert(3)</script> <svg onload=alert(4)></svg> '
    '[mixed](JaVaScRiPt:alert(5)) ![pic](javascript:alert(6)) <iframe src="javascript:alert(7)"></iframe> '
    '<b onmouseover="alert(8)">bold</b>'
)

# Anything script-bearing inside message content, as the browser parsed it (icons are SVG too,
# but they are the page's own, outside .md and .bubble).
DANGEROUS = """() => {
  const bad = [];
  for (const el of document.querySelectorAll("#thread .md *, #thread .bubble *")) {
    for (const attr of el.attributes) {
      if (/^on/i.test(attr.name)) bad.push(`${el.tagName} ${attr.name}`);
      if (/^\\s*javascript:/i.test(attr.value)) bad.push(`${el.tagName} ${attr.name}=${attr.value}`);
    }
    if (["SCRIPT", "IMG", "IFRAME", "SVG", "OBJECT", "EMBED"].includes(el.tagName.toUpperCase())) bad.push(el.tagName);
  }
  return bad;
}"""


@pytest.mark.hostile_content
def test_html_and_javascript_links_in_a_conversation_are_rendered_inert(open_chat):
    chat = open_chat()
    page = chat.page

    for text in (PAYLOAD, MORE):
        answer = chat.send(text)
        assert chat.wait_for_status(answer, "completed", "stopped", "failed") == "completed"
        # The engine really answered with the payload (so the rendering below was put to the test).
        saved = Message.objects.get(pk=chat.message_id(answer))
        assert saved.content.strip() == text

    question, answer = chat.questions().first, chat.answers().first
    # The question is shown exactly as typed, as text.
    expect(question.locator(".bubble")).to_have_text(PAYLOAD)
    # The answer is markdown: the link text is there, but the javascript: link has no href at all,
    # and the http link opens safely in a new tab.
    link = answer.locator(".md a", has_text="click")
    expect(link).to_have_count(1)
    assert link.get_attribute("href") is None
    docs = answer.locator(".md a", has_text="docs")
    expect(docs).to_have_attribute("href", "https://example.com/docs")
    expect(docs).to_have_attribute("rel", "noopener noreferrer")
    expect(docs).to_have_attribute("target", "_blank")

    assert page.evaluate(DANGEROUS) == []
    expect(page.locator("#thread .md img")).to_have_count(0)
    expect(page.locator("a[href^='javascript:' i]")).to_have_count(0)

    # Clicking and hovering the neutered elements does nothing either.
    url = page.url
    link.click()
    chat.answers().nth(1).locator(".md a", has_text="mixed").click()
    chat.answers().nth(1).get_by_text("bold").hover()
    expect(page).to_have_url(url)

    # The same holds after a reload, when the answers come from history rather than the stream.
    chat.reload()
    expect(chat.answers()).to_have_count(2, timeout=TIMEOUT)
    expect(chat.answers().first.locator(".md a", has_text="click")).to_have_count(1)
    assert page.evaluate(DANGEROUS) == []
    assert chat.dialogs == [], chat.dialogs

"""A small page object for the chat page, so tests read as what a person does and sees.

Everything waits through Playwright's auto-waiting expectations or `wait_for_function` with
generous timeouts; nothing asserts on elapsed time.
"""

from __future__ import annotations

import re

from playwright.sync_api import Locator, Page, expect

from tests.support.waiting import wait_until as _wait_until

TIMEOUT = 30_000  # ms, for anything that involves the engine
ANSWER_TIMEOUT = 90_000  # ms, for a whole long answer on a busy machine


def words(text: str) -> str:
    """Text with its whitespace normalized, to compare rendered markdown with what was sent."""
    return " ".join(text.split())


def wait_until(predicate, *, timeout: float = 60, **kwargs):
    """For conditions outside the browser (the database); pages are slower, so a longer default."""
    return _wait_until(predicate, timeout=timeout, **kwargs)


class ChatPage:
    def __init__(self, page: Page, base_url: str):
        self.page = page
        self.base_url = base_url
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("pageerror", self._on_error)
        # A dialog would block the page; record it (the XSS test fails on any) and dismiss it.
        page.on("dialog", self._on_dialog)

    def _on_error(self, error) -> None:
        self.errors.append(str(error))

    def _on_dialog(self, dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    # --- navigation -------------------------------------------------------------------------------

    def open(self, path: str = "/") -> ChatPage:
        self.page.goto(path)
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        expect(self.page.locator("#main[data-ready='true']")).to_be_attached(timeout=TIMEOUT)

    def reload(self) -> None:
        self.page.reload()
        self.wait_ready()

    # --- parts of the page --------------------------------------------------------------------------

    @property
    def prompt(self) -> Locator:
        return self.page.get_by_role("textbox", name="Message", exact=True)

    @property
    def stop_button(self) -> Locator:
        return self.page.get_by_role("button", name="Stop generating")

    @property
    def send_button(self) -> Locator:
        return self.page.get_by_role("button", name="Send message")

    @property
    def notice(self) -> Locator:
        return self.page.locator("#composer-notice")

    @property
    def sidebar(self) -> Locator:
        return self.page.get_by_role("complementary", name="Conversations")

    def answers(self) -> Locator:
        return self.page.locator("article.msg-assistant")

    def questions(self) -> Locator:
        return self.page.locator("article.msg-user")

    def last_answer(self) -> Locator:
        return self.answers().last

    def conversation_item(self, title: str) -> Locator:
        return self.sidebar.locator("li.conv-item").filter(has=self.page.get_by_text(title, exact=True))

    # --- actions ---------------------------------------------------------------------------------------

    def send(self, text: str) -> Locator:
        """Type into the composer and press Enter; returns the new answer's article."""
        before = self.answers().count()
        self.prompt.fill(text)
        self.prompt.press("Enter")
        expect(self.answers()).to_have_count(before + 1, timeout=TIMEOUT)
        return self.answers().nth(before)

    def answer_text(self, answer: Locator) -> str:
        return answer.locator(".md").inner_text()

    def wait_for_answer_text(self, answer: Locator, longer_than: int) -> int:
        """Wait until the answer shows more than `longer_than` characters; return its length then."""
        handle = answer.locator(".md").element_handle(timeout=TIMEOUT)
        self.page.wait_for_function(
            "([el, n]) => el.textContent.length > n", arg=[handle, longer_than], timeout=TIMEOUT
        )
        return len(handle.text_content())

    def wait_for_status(self, answer: Locator, *statuses: str, timeout: int = ANSWER_TIMEOUT) -> str:
        pattern = re.compile("^(" + "|".join(statuses) + ")$")
        expect(answer).to_have_attribute("data-status", pattern, timeout=timeout)
        return answer.get_attribute("data-status")

    def message_id(self, article: Locator) -> int:
        return int(article.get_attribute("data-id"))

    def conversation_id(self) -> int:
        expect(self.page).to_have_url(re.compile(r"/c/\d+/"), timeout=TIMEOUT)
        return int(re.search(r"/c/(\d+)/", self.page.url).group(1))

"""Browser end-to-end fixtures: Debian's headless Chromium (Playwright) against a live Daphne server.

The stack is this package's own: a simulated SGLang worker in echo mode (the answer is the user's
last message, streamed token by token at the "demo" speed), so a test decides what the answer says
(markdown, an XSS payload, a long text to stop or reload in the middle of) and can compare the
finished answer with what it sent. Daphne runs on the pytest test database; tests need
`transactional_db` (the `chat_user` fixture pulls it in).
"""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from playwright.sync_api import sync_playwright

from accounts.models import User
from chat.models import Message
from harness.engines import start_simulator
from tests.conftest import make_user
from tests.e2e.chatpage import ChatPage, wait_until
from tests.support.servers import start_daphne
from tests.support.sessions import browser_cookies, csrf_headers, session_cookie_for

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# Echo: the answer repeats the prompt, so tests choose its text and its length. "demo" streams about
# 25 tokens a second: slow enough to watch, stop and reload mid-answer.
ENGINE_ARGS = ["--echo", "--accept-any-model"]
ENGINE_SPEED = "demo"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="session")
def e2e_engine():
    engine = start_simulator(*ENGINE_ARGS, speed=ENGINE_SPEED)
    yield engine
    engine.stop()


@pytest.fixture(scope="session")
def e2e_server(django_db_setup, django_db_blocker, e2e_engine):
    server = start_daphne(engine_url=e2e_engine.url, extra_env={"SGLANG_SIMULATED": "1"})
    yield server
    server.stop()


@pytest.fixture(scope="package", autouse=True)
def _orm_beside_playwright():
    """Playwright's sync API keeps an asyncio loop on the test thread; Django would take every ORM
    call a test makes between browser steps for a call from async code and refuse it. Only for these
    tests: the setting must not leak into the rest of the suite (or the deploy checks)."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


# Package scope: the browser's event loop must be gone before the suite's async tests run.
@pytest.fixture(scope="package")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


#: What the policy blocks when a test feeds the page markup built to attack it (`hostile_content`).
HOSTILE_BLOCKS = ("Executing inline event handler", "Executing inline script", "Running the JavaScript URL")


#: DOMPurify parses the markup it cleans in an inert document of its own, which inherits the page's
#: policy: Chromium reports the hostile markup's inline styles and handlers there too, though nothing in
#: that document renders, loads or runs.
SANITIZER_PARSE = "/static/vendor/dompurify/purify.es.mjs)"


def unexpected_violations(request, violations: list[str]) -> list[str]:
    """The violations that fail the test: all of them, except the blocks of hostile markup a test marked
    `hostile_content` feeds on purpose (such a test asserts itself that nothing ran)."""
    if request.node.get_closest_marker("hostile_content") is None:
        return violations
    return [v for v in violations if not (v.startswith(HOSTILE_BLOCKS) or v.endswith(SANITIZER_PARSE))]


def watch_policy(context, violations: list[str]) -> None:
    """Record every Content-Security-Policy violation on the context's pages (Chromium reports each on
    the console), so every browser test also proves its pages work under the policy."""

    def seen(message) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            violations.append(f"{message.text} (at {message.location.get('url', '?')})")

    context.on("console", seen)


def new_context(
    browser,
    base_url: str,
    violations: list[str],
    *,
    user: User | None,
    viewport: dict | None,
    theme: str,
    bypass_csp: bool,
    locale: str = "en-US",
):
    """A fresh browser context on `base_url` in `theme`, its policy violations recorded in `violations`,
    signed in as `user` (by session cookie) when given. `locale` is the browser's language (its
    Accept-Language)."""
    context = browser.new_context(
        base_url=base_url,
        viewport=viewport or DESKTOP,
        color_scheme=theme,
        reduced_motion="reduce",
        bypass_csp=bypass_csp,
        locale=locale,
    )
    context.add_init_script(f"try {{ localStorage.setItem('theme', '{theme}') }} catch (e) {{}}")
    watch_policy(context, violations)
    if user is not None:
        session = session_cookie_for(user)
        context.add_cookies([{"name": name, "value": value, "url": base_url} for name, value in session.items()])
    return context


@pytest.fixture
def chat_user(transactional_db) -> User:
    return make_user("ada@example.com", display_name="Ada")


@pytest.fixture
def open_chat(browser, e2e_server, chat_user, request):
    """Open the chat page as `chat_user` (signed in by cookie); returns ChatPage objects.

    Each call is a fresh browser context (its own cookies and storage), so a test can hold two tabs
    of the same user, or a phone and a desktop. `bypass_csp` has the browser ignore the policy (to
    prove what the page's own code does without it). Every JavaScript error on any page fails the test, and
    so does every violation of the Content-Security-Policy.
    """
    contexts, pages, violations = [], [], []

    def _open(
        path: str | None = "/",
        *,
        viewport: dict | None = None,
        theme: str = "light",
        signed_in: bool = True,
        server=None,
        bypass_csp: bool = False,
        locale: str = "en-US",
    ) -> ChatPage:
        base_url = (server or e2e_server).base_url
        context = new_context(
            browser,
            base_url,
            violations,
            user=chat_user if signed_in else None,
            viewport=viewport,
            theme=theme,
            bypass_csp=bypass_csp,
            locale=locale,
        )
        contexts.append(context)
        chat = ChatPage(context.new_page(), base_url)
        pages.append(chat)
        if path is not None:
            chat.open(path)
        return chat

    yield _open

    _settle_generations(e2e_server)
    for context in contexts:
        context.close()
    errors = [error for chat in pages for error in chat.errors]
    assert not errors, f"JavaScript errors on the page: {errors}"
    violations = unexpected_violations(request, violations)
    assert not violations, f"Content-Security-Policy violations: {violations}"


@pytest.fixture
def open_page(browser, e2e_server, transactional_db, request):
    """A fresh browser context on any page (not only the chat): signed in as `user` when given, else
    anonymous. Returns the Playwright page; every JavaScript error and every Content-Security-Policy
    violation on it fails the test."""
    contexts, errors, violations = [], [], []

    def _open(
        path: str | None = "/",
        *,
        user: User | None = None,
        viewport: dict | None = None,
        theme: str = "light",
        bypass_csp: bool = False,
        locale: str = "en-US",
    ):
        context = new_context(
            browser,
            e2e_server.base_url,
            violations,
            user=user,
            viewport=viewport,
            theme=theme,
            bypass_csp=bypass_csp,
            locale=locale,
        )
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        if path is not None:
            page.goto(path)
        return page

    yield _open

    for context in contexts:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
    violations = unexpected_violations(request, violations)
    assert not violations, f"Content-Security-Policy violations: {violations}"


def _settle_generations(server) -> None:
    """Let every answer end before the test database is flushed under the server's feet."""
    import httpx

    active = list(Message.objects.filter(status__in=Message.ACTIVE_STATUSES).select_related("conversation__owner"))
    for message in active:
        cookies = browser_cookies(message.conversation.owner)
        httpx.post(
            f"{server.base_url}/chat/api/messages/{message.pk}/stop",
            cookies=cookies,
            headers=csrf_headers(server),
            timeout=30,
        )
    wait_until(
        lambda: not Message.objects.filter(status__in=Message.ACTIVE_STATUSES).exists(), what="every generation to end"
    )


@pytest.fixture
def screenshot_dir(tmp_path):
    """docs/screenshots/ when E2E_SCREENSHOTS=1 (to refresh the committed ones), else a temp dir."""
    if os.environ.get("E2E_SCREENSHOTS") == "1":
        path = settings.BASE_DIR / "docs" / "screenshots"
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path

"""Browser fixtures of the security suite (tests/security/test_csp_browser.py, test_xss.py).

One stack per test module: a simulated SGLang worker in echo mode (its answer is the user's message, so
a test chooses what the engine streams back: a payload), Daphne in front of it on the test database,
and headless Chromium. `watched` opens browser contexts with a `Watch` (browser_watch.py) attached.
"""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import sync_playwright

from harness.engines import start_simulator
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, DESKTOP, _settle_generations
from tests.security.browser_watch import Watch
from tests.support.servers import start_daphne
from tests.support.sessions import session_cookie_for


@pytest.fixture(scope="module")
def echo_site(django_db_setup, django_db_blocker):
    """Daphne in front of an echoing worker that streams quickly (no test here stops an answer midway)."""
    engine = start_simulator("--echo", "--accept-any-model", speed="fast")
    server = start_daphne(engine_url=engine.url, extra_env={"SGLANG_SIMULATED": "1"})
    yield server
    server.stop()
    engine.stop()


@pytest.fixture(scope="module")
def chromium():
    """Headless Chromium. Playwright's sync API keeps an asyncio loop on the test thread, so Django
    would refuse the ORM calls a test makes between browser steps; allowed for this module only."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def watched(chromium, echo_site, transactional_db):
    """`watched(user=None)`: a fresh browser context (signed in as `user` by cookie when given) with a
    Watch on it. Every context is closed after the test, once any answer still running has ended."""
    contexts = []

    def _open(user=None, *, viewport: dict | None = None, without_policy: bool = False) -> Watch:
        context = chromium.new_context(
            base_url=echo_site.base_url, viewport=viewport or DESKTOP, reduced_motion="reduce"
        )
        if user is not None:
            cookies = session_cookie_for(user)
            context.add_cookies([{"name": k, "value": v, "url": echo_site.base_url} for k, v in cookies.items()])
        contexts.append(context)
        watch = Watch(context)
        if without_policy:
            # The server's pages with their Content-Security-Policy taken off: what escaping and
            # sanitizing achieve on their own, as in a browser that does not enforce the policy.
            context.route(f"{echo_site.base_url}/**", _without_policy)
        return watch

    yield _open

    _settle_generations(echo_site)
    for context in contexts:
        context.close()


def _without_policy(route) -> None:
    response = route.fetch()
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-security-policy"}
    route.fulfill(response=response, headers=headers)

"""The product works in Chromium under its Content-Security-Policy, and the policy bites.

- a person signs in through the form, sends a message and watches the answer stream in (markdown drawn
  by the ES modules the import map names), with no violation reported;
- every page of the URL conf a visitor, a member and a superuser can open (the console's included)
  loads without a violation, a JavaScript error or a dialog, and the console's dashboard and the Usage
  page draw their charts;
- script and style injected into the page are refused and reported: the watch that proves "no
  violation" above does see one when there is one.
"""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import expect

from chat.models import Message
from tests.conftest import PASSWORD, make_user
from tests.e2e.chatpage import ANSWER_TIMEOUT, TIMEOUT, ChatPage
from tests.security.csp_pages import build_world, every_path
from tests.support.sessions import session_cookie_for

pytestmark = pytest.mark.e2e

DASHBOARD_CHARTS = [
    "chart-last-hour",
    "chart-load",
    "chart-ttft",
    "chart-tokens",
    "chart-cache",
    "chart-refused",
    "chart-moderation",
    "chart-today",
]


def test_a_person_signs_in_sends_a_message_and_sees_the_streamed_answer_without_a_violation(watched):
    make_user("ada@example.com", display_name="Ada")
    watch = watched()
    page = watch.new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Email").fill("ada@example.com")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign In").click()
    expect(page).to_have_url(re.compile(r"^https?://[^/]+/$"))
    chat = ChatPage(page, "")
    chat.wait_ready()

    text = "Under the policy: **bold**, `code` and a [link](https://example.com/)."
    answer = chat.send(text)
    # The answer streams (the engine echoes the message) and ends with the whole text, drawn as markdown.
    expect(answer.locator(".md")).not_to_be_empty(timeout=TIMEOUT)
    assert chat.wait_for_status(answer, "completed", "stopped", "failed", timeout=ANSWER_TIMEOUT) == "completed"
    expect(answer.locator(".md strong")).to_have_text("bold")
    expect(answer.locator(".md code")).to_have_text("code")
    expect(answer.locator(".md a")).to_have_attribute("href", "https://example.com/")
    assert Message.objects.get(pk=chat.message_id(answer)).content.strip() == text
    # The sidebar heard about the new conversation over the WebSocket.
    expect(chat.sidebar.locator("li.conv-item")).to_have_count(1, timeout=TIMEOUT)

    chat.reload()  # history, drawn from the page's data rather than the stream
    expect(chat.answers().first.locator(".md strong")).to_have_text("bold")
    watch.assert_clean("chat page")


def test_script_and_style_injected_into_the_page_are_refused_and_reported(watched):
    """The other tests assert that nothing was reported; this one shows a violation would be seen."""
    member = make_user("ada@example.com")
    watch = watched(member)
    page = watch.new_page()
    ChatPage(page, "").open("/")
    page.evaluate(
        """() => {
        const script = document.createElement("script");
        script.textContent = "__xss('inline-script')";
        document.body.append(script);
        const box = document.createElement("div");
        box.innerHTML = '<p style="color: red">styled</p><img src="x" onerror="__xss(\\'handler\\')">';
        document.body.append(box);
    }"""
    )
    page.wait_for_function("() => (window.__watch || []).filter(r => r.kind === 'csp').length >= 3", timeout=TIMEOUT)
    problems = watch.problems()
    directives = {v["detail"]["directive"] for v in problems["csp_violations"]}
    assert {"script-src-elem", "style-src-attr", "script-src-attr"} <= directives, problems
    assert problems["scripts_that_ran"] == []  # refused, not merely reported


def _html_pages(base_url: str, user, paths: list[str]) -> list[str]:
    """The paths that answer `user` (or a visitor) with a page: 200, HTML."""
    cookies = session_cookie_for(user) if user is not None else {}
    pages = []
    with httpx.Client(base_url=base_url, cookies=cookies, timeout=30) as http:
        for path in paths:
            response = http.get(path)
            if response.status_code == 200 and response.headers["content-type"].startswith("text/html"):
                pages.append(path)
    return pages


@pytest.mark.parametrize("who", ["visitor", "member", "superuser"])
def test_every_page_loads_in_chromium_without_a_violation(watched, echo_site, who):
    world = build_world()
    user = {"visitor": None, "member": world.member, "superuser": world.staff}[who]
    # Pages that end the session or spend a one-time value would change what the next page shows.
    paths = [p for p in every_path(world) if "logout" not in p]
    pages = _html_pages(echo_site.base_url, user, paths)
    assert len(pages) > {"visitor": 5, "member": 20, "superuser": 80}[who]

    watch = watched(user)
    page = watch.new_page()
    failed = []
    page.on("response", lambda r: r.status >= 400 and "/static/" in r.url and failed.append(r.url))
    for path in pages:
        page.goto(path)
        page.wait_for_load_state("load")
        if path in ("/", f"/c/{world.conversation.pk}/") and user is not None:
            ChatPage(page, "").wait_ready()
        if path.startswith("/s/"):
            expect(page.locator(".md em").first).to_have_text("you", timeout=TIMEOUT)  # the modules ran
        watch.flush()
        if watch.violations or watch.console_policy_lines:
            break  # the first page with a violation is the one to read about
    assert failed == [], failed
    watch.assert_clean(f"{who} at {page.url}")


def test_the_console_dashboard_and_the_usage_page_draw_their_charts_under_the_policy(watched):
    world = build_world()
    watch = watched(world.staff)
    page = watch.new_page()
    page.goto("/admin/")
    expect(page.get_by_role("heading", name="Dashboard", exact=True)).to_be_visible()
    for chart in DASHBOARD_CHARTS:
        # Chart.js sized the canvas (through the CSSOM, which the policy allows) and holds a chart for it.
        expect(page.locator(f"#{chart}")).to_have_attribute("style", re.compile("height"), timeout=TIMEOUT)
    drawn = page.evaluate("ids => ids.filter(id => window.Chart && Chart.getChart(id))", DASHBOARD_CHARTS)
    assert drawn == DASHBOARD_CHARTS

    page.goto("/billing/usage/")
    expect(page.locator("#usage-chart")).to_have_attribute("style", re.compile("height"), timeout=TIMEOUT)
    assert page.evaluate("() => Boolean(window.Chart && Chart.getChart('usage-chart'))")
    watch.assert_clean("charts")

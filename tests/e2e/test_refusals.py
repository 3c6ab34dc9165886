"""Refusals as a person meets them: busy with an automatic retry, rate limit, quota. What was typed
is never lost."""

import re

import pytest
from playwright.sync_api import expect

from chat.models import Message
from tests.e2e.chatpage import ANSWER_TIMEOUT, TIMEOUT, words
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.e2e

LONG = " ".join(f"Line {n} keeps the first answer busy for a while." for n in range(1, 41))


@pytest.fixture(scope="module")
def busy_server(django_db_setup, django_db_blocker, e2e_engine):
    """A server that turns the free tier away as soon as one answer is being generated."""
    server = start_daphne(engine_url=e2e_engine.url,
                          extra_env={"ADMISSION_SOFT_LIMIT": "1", "ADMISSION_HARD_LIMIT": "50"})
    yield server
    server.stop()


def test_busy_shows_a_countdown_keeps_the_text_and_retries_by_itself(open_chat, busy_server):
    first = open_chat(server=busy_server)
    answer = first.send(LONG)
    first.wait_for_answer_text(answer, 10)

    second = open_chat(server=busy_server)
    sends = []
    second.page.on("request", lambda r: sends.append(r) if r.url.endswith("/chat/api/send") else None)
    second.prompt.fill("Second question.")
    second.prompt.press("Enter")

    # 503 busy: a visible countdown (free plan: Retry-After as is on the first attempt), text kept.
    expect(second.notice).to_contain_text(re.compile(r"Busy, retrying in \d+ s"), timeout=TIMEOUT)
    expect(second.prompt).to_have_value("Second question.")
    expect(second.answers()).to_have_count(0)

    # Room frees up; the retry goes through on its own, without the person doing anything.
    first.stop_button.click()
    first.wait_for_status(answer, "stopped", "completed")
    expect(second.answers()).to_have_count(1, timeout=ANSWER_TIMEOUT)
    reply = second.last_answer()
    assert second.wait_for_status(reply, "completed", "stopped", "failed") == "completed"
    assert words(second.answer_text(reply)) == "Second question."
    expect(second.notice).to_be_hidden()
    expect(second.prompt).to_have_value("")
    assert len(sends) >= 2


# Records the number each "Busy, retrying in N s" countdown starts from.
RECORD_COUNTDOWNS = """() => {
  window.__countdowns = [];
  let last = null;
  new MutationObserver(() => {
    const match = /retrying in (\\d+) s/.exec(document.getElementById("composer-notice").textContent);
    const n = match ? Number(match[1]) : null;
    if (n !== null && (last === null || n > last)) window.__countdowns.push(n);
    last = n;
  }).observe(document.getElementById("composer-notice"), { subtree: true, childList: true, characterData: true });
}"""

BUSY = ('{"error": {"code": "busy", "message": "The servers are busy.", "status": 503, "retry_after": 1}}')


@pytest.mark.parametrize(("plan", "expected"), [("free", [1, 2, 4]), ("plus", [1, 2, 3])])
def test_busy_retries_back_off_exponentially_on_free_and_linearly_on_paid_plans(open_chat, chat_user, plan,
                                                                                expected):
    put_on_plan(chat_user, plan)
    chat = open_chat()
    refusals = []

    def busy_three_times(route):
        if len(refusals) < 3:
            refusals.append(route.request.url)
            route.fulfill(status=503, headers={"Retry-After": "1"}, content_type="application/json", body=BUSY)
        else:
            route.continue_()

    chat.page.route("**/chat/api/send", busy_three_times)
    chat.page.evaluate(RECORD_COUNTDOWNS)
    answer = chat.send("Patience pays.")

    assert chat.wait_for_status(answer, "completed", "stopped", "failed") == "completed"
    assert len(refusals) == 3
    assert chat.page.evaluate("window.__countdowns") == expected


def test_quota_exceeded_explains_links_to_plans_and_keeps_the_text(open_chat, chat_user):
    put_on_plan(chat_user, "free", tokens_per_month=10)
    chat = open_chat()

    chat.prompt.fill("A question my plan cannot afford.")
    chat.prompt.press("Enter")

    expect(chat.notice).to_be_visible(timeout=TIMEOUT)
    expect(chat.notice).to_contain_text(re.compile(r"token|quota|plan", re.IGNORECASE))
    expect(chat.notice.get_by_role("link", name="See plans")).to_have_attribute("href", "/billing/plans/")
    expect(chat.prompt).to_have_value("A question my plan cannot afford.")
    expect(chat.answers()).to_have_count(0)
    assert not Message.objects.filter(conversation__owner=chat_user).exists()

    # The draft survives a reload too (it is kept in localStorage as it is typed).
    chat.reload()
    expect(chat.prompt).to_have_value("A question my plan cannot afford.")


def test_rate_limited_says_when_to_try_again_and_keeps_the_text(open_chat, chat_user):
    put_on_plan(chat_user, "free", requests_per_minute=1)
    chat = open_chat()
    answer = chat.send("One.")
    chat.wait_for_status(answer, "completed", "stopped", "failed")

    chat.prompt.fill("Two, too soon.")
    chat.prompt.press("Enter")

    expect(chat.notice).to_contain_text(re.compile(r"You can send again in \d+ s"), timeout=TIMEOUT)
    expect(chat.notice.get_by_role("link", name="See plans")).to_be_visible()
    expect(chat.prompt).to_have_value("Two, too soon.")
    expect(chat.answers()).to_have_count(1)

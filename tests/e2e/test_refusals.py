"""Refusals as a person meets them: busy with an automatic retry, rate limit, quota. What was typed
is never lost."""

import json
import re

import pytest
from playwright.sync_api import expect

from billing import services as billing
from chat.models import Conversation, Message
from config.refusals import Busy, scheduled
from tests.chat.factories import conversation_for, exchange
from tests.e2e.chatpage import ANSWER_TIMEOUT, TIMEOUT, words
from tests.e2e.conftest import DESKTOP, PHONE
from tests.support.plans import put_on_plan
from tests.support.rate_limits import requests_made
from tests.support.servers import start_daphne

pytestmark = pytest.mark.e2e

LONG = " ".join(f"Line {n} keeps the first answer busy for a while." for n in range(1, 41))


@pytest.fixture(scope="module")
def busy_server(django_db_setup, django_db_blocker, e2e_engine):
    """A server that turns the free tier away as soon as one answer is being generated."""
    server = start_daphne(
        engine_url=e2e_engine.url, extra_env={"ADMISSION_SOFT_LIMIT": "1", "ADMISSION_HARD_LIMIT": "50"}
    )
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


def busy_body(*, premium: bool) -> str:
    """A busy refusal as the server sends it to a person of that class: with its waits decided."""
    refusal = scheduled(Busy("The servers are busy.", retry_after=1), premium=premium)
    return json.dumps({"error": refusal.as_dict()})


@pytest.mark.parametrize(("plan", "expected"), [("free", [1, 2, 4]), ("plus", [1, 2, 3])])
def test_busy_retries_back_off_exponentially_on_free_and_linearly_on_paid_plans(open_chat, chat_user, plan, expected):
    """The page counts down the waits the server's refusal names (the server decides them by plan:
    tests/chat/test_admission.py), one refusal after another, and sends by itself after each."""
    put_on_plan(chat_user, plan)
    chat = open_chat()
    refusals = []
    body = busy_body(premium=plan != "free")

    def busy_three_times(route):
        if len(refusals) < 3:
            refusals.append(route.request.url)
            route.fulfill(status=503, headers={"Retry-After": "1"}, content_type="application/json", body=body)
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


# Records each number the rate-limit notice shows, and the most waits it ever shows at once (the
# visible text only: the sentence for screen readers is said once and not counted down).
RECORD_WAITS = """() => {
  window.__waits = [];
  window.__mostWaitsAtOnce = 0;
  const notice = document.getElementById("composer-notice");
  new MutationObserver(() => {
    const shown = [...notice.childNodes]
      .filter((node) => !(node.classList && node.classList.contains("visually-hidden")))
      .map((node) => node.textContent).join("");
    const waits = [...shown.matchAll(/\\b(\\d+) s(?:econds?)?\\b/g)].map((match) => Number(match[1]));
    window.__mostWaitsAtOnce = Math.max(window.__mostWaitsAtOnce, waits.length);
    if (waits.length && waits[0] !== window.__waits.at(-1)) window.__waits.push(waits[0]);
  }).observe(notice, { subtree: true, childList: true, characterData: true });
}"""

WAIT = re.compile(r"Try again in (\d+) seconds?")


def test_rate_limited_counts_down_holds_send_keeps_the_text_and_clears_itself(open_chat, chat_user):
    plan = put_on_plan(chat_user, "free", requests_per_minute=1)
    chat = open_chat()
    sends = []
    chat.page.on("request", lambda r: sends.append(r) if r.url.endswith("/chat/api/send") else None)
    chat.page.evaluate(RECORD_WAITS)
    chat.prompt.fill("Sent when the minute is up.")
    # The plan's one request a minute was made 50 s ago: this one is refused for about 10 s more.
    requests_made(chat_user, plan, seconds_ago=50)
    chat.prompt.press("Enter")

    shown = chat.notice.locator(".notice-text")
    expect(shown).to_contain_text(WAIT, timeout=TIMEOUT)
    expect(shown).to_contain_text("limit of 1 request a minute of the Free plan")
    first = int(WAIT.search(shown.text_content()).group(1))
    assert 1 <= first <= 10
    expect(chat.notice.get_by_role("link", name="See plans")).to_be_visible()
    expect(chat.send_button).to_be_disabled()
    expect(chat.prompt).to_have_value("Sent when the minute is up.")
    chat.prompt.press("Enter")  # nothing is sent while the limit holds
    expect(chat.answers()).to_have_count(0)

    # The notice counts down and clears itself when sending is possible again; the text is still there.
    expect(chat.notice).to_be_hidden(timeout=TIMEOUT)
    expect(chat.send_button).to_be_enabled()
    expect(chat.prompt).to_have_value("Sent when the minute is up.")
    waits = chat.page.evaluate("window.__waits")
    assert waits[0] == first and len(waits) >= 2 and waits == sorted(set(waits), reverse=True), waits
    assert chat.page.evaluate("window.__mostWaitsAtOnce") == 1  # the wait is said once, not twice
    assert len(sends) == 1

    # And it is true: the server takes the message now.
    chat.prompt.press("Enter")
    expect(chat.answers()).to_have_count(1, timeout=ANSWER_TIMEOUT)
    assert chat.wait_for_status(chat.last_answer(), "completed", "stopped", "failed") == "completed"
    expect(chat.prompt).to_have_value("")


@pytest.mark.parametrize("screen", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_one_answer_too_many_at_once_waits_for_one_to_finish_and_then_sends_by_itself(open_chat, chat_user, screen):
    """No made-up time: the sentence says how many answers are running, Send waits (Cancel gives the text
    back to the box), and the message goes as soon as one of them ends."""
    put_on_plan(chat_user, "free", answers_at_once=1)
    first = open_chat()
    answer = first.send(LONG)
    first.wait_for_answer_text(answer, 10)

    second = open_chat(viewport=screen)
    second.prompt.fill("A second question, in another tab.")
    second.prompt.press("Enter")

    shown = second.notice.locator(".notice-text")
    expect(shown).to_have_text(
        "You already have 1 answer being written, the most the Free plan allows at once. Another can start as soon "
        "as one of them finishes (Plus allows 4 at once). Your message will be sent as soon as one finishes.",
        timeout=TIMEOUT,
    )
    expect(second.notice).not_to_contain_text(re.compile(r"\d+ seconds?|\d+ s\b"))
    expect(second.notice.get_by_role("link", name="See plans")).to_be_visible()
    expect(second.notice.get_by_role("button", name="Cancel")).to_be_in_viewport()
    expect(second.send_button).to_be_disabled()
    expect(second.prompt).to_have_value("A second question, in another tab.")
    expect(second.answers()).to_have_count(0)

    # Cancel: nothing is sent, the text stays, and Send works again.
    second.notice.get_by_role("button", name="Cancel").click()
    expect(second.notice).to_be_hidden()
    expect(second.send_button).to_be_enabled()
    expect(second.prompt).to_have_value("A second question, in another tab.")

    # Waiting again; the first answer ends, and the same text is sent with nothing pressed.
    second.prompt.press("Enter")
    expect(shown).to_contain_text("Your message will be sent as soon as one finishes.", timeout=TIMEOUT)
    first.stop_button.click()
    first.wait_for_status(answer, "stopped", "completed")
    expect(second.answers()).to_have_count(1, timeout=ANSWER_TIMEOUT)
    expect(second.notice).to_be_hidden()
    assert second.wait_for_status(second.last_answer(), "completed", "stopped", "failed") == "completed"
    assert words(second.answer_text(second.last_answer())) == "A second question, in another tab."
    expect(second.prompt).to_have_value("")


def test_a_new_chat_beyond_the_day_explains_links_to_plans_and_old_chats_still_take_messages(open_chat, chat_user):
    plan = put_on_plan(chat_user, "free", new_chats_per_day=1)
    old = conversation_for(chat_user, title="Yesterday's chat")
    exchange(old, "Water?", "100 degrees.")
    billing.count_new_chat(chat_user, plan)  # today's one new chat is used
    chat = open_chat(viewport=PHONE)

    chat.prompt.fill("A new chat too many.")
    chat.prompt.press("Enter")

    shown = chat.notice.locator(".notice-text")
    expect(shown).to_contain_text(
        "You started 1 new chat in the last 24 hours, the most the Free plan allows.", timeout=TIMEOUT
    )
    expect(shown).to_contain_text("keep writing in the chats you have, or upgrade to Plus for 500 a day.")
    expect(chat.notice.get_by_role("link", name="See plans")).to_have_attribute("href", "/billing/plans/")
    expect(chat.prompt).to_have_value("A new chat too many.")
    expect(chat.send_button).to_be_enabled()  # not a countdown: the chats already there go on
    expect(chat.answers()).to_have_count(0)
    assert chat.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]

    chat.open(f"/c/{old.pk}/")
    answer = chat.send("And ethanol?")
    assert chat.wait_for_status(answer, "completed", "stopped", "failed") == "completed"
    assert Conversation.objects.filter(owner=chat_user).count() == 1

"""The path of one message as a person sees it: sign in, send, watch it stream, stop, reload."""

import re

import pytest
from playwright.sync_api import expect

from chat.models import Message
from tests.conftest import PASSWORD
from tests.e2e.chatpage import ANSWER_TIMEOUT, TIMEOUT, words

pytestmark = pytest.mark.e2e

# The engine echoes the prompt, so a long prompt is a long answer (about 25 tokens a second).
LONG = " ".join(
    f"Sentence {n} of a long answer about lighthouses, tides and the keepers who watched them." for n in range(1, 17)
)


def test_sign_in_through_the_login_form_and_watch_an_answer_stream_then_complete(open_chat, chat_user):
    chat = open_chat(None, signed_in=False)
    page = chat.page
    page.goto("/")  # a visitor sees the landing page, and signs in from it
    page.get_by_role("main").get_by_role("link", name="Sign in", exact=True).first.click()
    expect(page).to_have_url(re.compile(r"/accounts/login/"), timeout=TIMEOUT)
    page.get_by_label("Email").fill(chat_user.email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    chat.wait_ready()
    expect(page.get_by_test_id("simulated-banner")).to_be_visible()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(f"{request.method} {request.url}"))

    answer = chat.send(LONG)

    # The text grows over several observations while the answer is still streaming ...
    lengths = [0]
    for _ in range(4):
        lengths.append(chat.wait_for_answer_text(answer, lengths[-1]))
    assert lengths == sorted(set(lengths)), lengths
    assert answer.get_attribute("data-status") in {"pending", "streaming"}
    assert "Sentence" not in page.locator("#announcer").text_content()
    expect(chat.stop_button).to_be_visible()
    # ... then it completes, whole and exactly once, and the composer is ready again.
    assert chat.wait_for_status(answer, "completed", "stopped", "failed") == "completed"
    assert words(chat.answer_text(answer)) == words(LONG)
    expect(chat.send_button).to_be_visible()
    expect(chat.prompt).to_have_value("")
    # The answer is announced when it is finished (not token by token).
    expect(page.locator("#announcer")).to_have_text(
        re.compile(r"^Answer: Sentence 1 of a long answer"), timeout=TIMEOUT
    )
    saved = Message.objects.get(pk=chat.message_id(answer))
    assert saved.status == Message.Status.COMPLETED and words(saved.content) == words(LONG)
    # One request carried the whole answer: the send's response was its stream.
    assert [r for r in requests if "/chat/api/send" in r or "/stream" in r] == [f"POST {chat.base_url}/chat/api/send"]


def test_a_send_whose_stream_drops_mid_answer_resumes_on_the_answers_stream_every_token_once(open_chat):
    chat = open_chat()
    page = chat.page
    cut: dict = {}

    def drop_after_three_deltas(route):
        # The real send, whose stream the browser is then given only up to its third delta, as if the
        # connection had dropped there.
        body = route.fetch(timeout=120_000).text()
        events = body.split("\n\n")
        kept = [e for e in events if "event: turn" in e or "event: delta" in e][:4]
        cut["last_id"] = kept[-1].split("\n")[0].removeprefix("id: ")
        route.fulfill(status=201, content_type="text/event-stream", body="\n\n".join(kept) + "\n\n")

    page.route("**/chat/api/send", drop_after_three_deltas)
    resumed: list[str] = []
    page.on("request", lambda request: "/stream" in request.url and resumed.append(request.url))

    answer = chat.send(LONG)

    assert chat.wait_for_status(answer, "completed", "stopped", "failed") == "completed"
    assert words(chat.answer_text(answer)) == words(LONG)
    assert resumed and resumed[0].endswith(f"/stream?after={cut['last_id']}")


def test_the_pages_event_stream_reader_reads_any_line_ending_split_anywhere(open_chat):
    """The reader of the send's stream (static/chat/stream.js), given a stream cut every 3 bytes: through
    a CRLF, a CR-only line end and a two-byte character."""
    page = open_chat().page
    events = page.evaluate(
        """async () => {
          const src = document.querySelector('script[type="module"][src*="chat"]').src;
          const { readEvents } = await import(new URL("stream.js", src).href);
          const text = 'id: 1\\r\\nevent: delta\\r\\ndata: {"text": "h\\u00e9"}\\r\\n\\r\\n: keepalive\\r\\n\\r\\n'
            + 'event: done\\rdata: {"a":\\rdata: 1}\\r\\r';
          const bytes = new TextEncoder().encode(text);
          const body = new ReadableStream({ start(c) {
            for (let i = 0; i < bytes.length; i += 3) c.enqueue(bytes.slice(i, i + 3));
            c.close();
          } });
          const out = [];
          for await (const e of readEvents(body)) out.push(e);
          return out;
        }"""
    )
    assert events == [
        {"id": "1", "event": "delta", "data": '{"text": "h\u00e9"}'},
        {"id": None, "event": "done", "data": '{"a":\n1}'},
    ]


def test_the_stop_button_ends_the_answer_keeping_its_partial_text(open_chat):
    chat = open_chat()
    answer = chat.send(LONG)
    chat.wait_for_answer_text(answer, 40)

    chat.stop_button.click()

    assert chat.wait_for_status(answer, "stopped", "completed") == "stopped"
    shown = words(chat.answer_text(answer))
    assert shown and len(shown) < len(words(LONG)) and words(LONG).startswith(shown)
    expect(answer.locator(".msg-notice")).to_contain_text("Stopped")
    saved = Message.objects.get(pk=chat.message_id(answer))
    assert saved.status == Message.Status.STOPPED and words(saved.content) == shown


def test_escape_stops_the_answer_from_the_composer(open_chat):
    chat = open_chat()
    answer = chat.send(LONG)
    chat.wait_for_answer_text(answer, 40)
    expect(chat.prompt).to_be_focused()

    chat.prompt.press("Escape")

    assert chat.wait_for_status(answer, "stopped", "completed") == "stopped"
    assert Message.objects.get(pk=chat.message_id(answer)).status == Message.Status.STOPPED


def test_a_reload_mid_answer_shows_it_finishing_whole(open_chat):
    chat = open_chat()
    answer = chat.send(LONG)
    chat.wait_for_answer_text(answer, 60)
    conversation_id = chat.conversation_id()

    chat.reload()

    expect(chat.page).to_have_url(f"{chat.base_url}/c/{conversation_id}/")
    answer = chat.last_answer()
    # Re-attached mid-answer: still generating after the reload, then finished, every token once.
    expect(answer).to_have_attribute("data-status", "streaming", timeout=TIMEOUT)
    assert chat.wait_for_status(answer, "completed", "stopped", "failed") == "completed"
    assert words(chat.answer_text(answer)) == words(LONG)


def test_regenerate_and_edit_make_branches_that_can_be_switched(open_chat):
    chat = open_chat()
    first = chat.send("Alpha beta gamma.")
    chat.wait_for_status(first, "completed")
    streams_read: list[str] = []
    chat.page.on("request", lambda request: "/stream" in request.url and streams_read.append(request.url))

    # Regenerate the last answer: a second version beside the first.
    first.get_by_role("button", name="Regenerate answer").click()
    expect(chat.page.get_by_role("group", name="Version 2 of 2")).to_be_visible(timeout=TIMEOUT)
    chat.wait_for_status(chat.last_answer(), "completed")
    assert words(chat.answer_text(chat.last_answer())) == "Alpha beta gamma."
    chat.page.get_by_role("button", name="Previous version").click()
    expect(chat.page.get_by_role("group", name="Version 1 of 2")).to_be_visible(timeout=TIMEOUT)
    expect(chat.page).to_have_url(re.compile(r"\?leaf=\d+"))

    # Edit the question and resend: a new branch of the user message, answered anew.
    question = chat.questions().first
    question.hover()
    question.get_by_role("button", name="Edit message").click()
    editor = chat.page.get_by_role("textbox", name="Edit your message")
    editor.fill("Delta epsilon zeta.")
    editor.press("Enter")
    expect(chat.questions().first.locator(".bubble")).to_have_text("Delta epsilon zeta.", timeout=TIMEOUT)
    expect(chat.questions().first.get_by_role("group", name="Version 2 of 2")).to_be_visible()
    answer = chat.last_answer()
    chat.wait_for_status(answer, "completed")
    assert words(chat.answer_text(answer)) == "Delta epsilon zeta."
    assert streams_read == []  # each new answer came on the response of its own request

    chat.questions().first.get_by_role("button", name="Previous version").click()
    expect(chat.questions().first.locator(".bubble")).to_have_text("Alpha beta gamma.", timeout=TIMEOUT)


def test_a_second_tab_sees_the_conversation_generating_in_its_sidebar(open_chat):
    sender = open_chat()
    watcher = open_chat()
    answer = sender.send(LONG)
    conversation_id = sender.conversation_id()

    item = watcher.sidebar.locator(f"li.conv-item[data-id='{conversation_id}']")
    expect(item).to_have_attribute("data-generating", "true", timeout=TIMEOUT)
    expect(item.get_by_text("(generating)")).to_be_attached()

    sender.wait_for_status(answer, "completed", timeout=ANSWER_TIMEOUT)
    expect(item).to_have_attribute("data-generating", "false", timeout=TIMEOUT)


def test_the_composer_keeps_a_draft_per_conversation(open_chat):
    chat = open_chat()
    answer = chat.send("First question.")
    chat.wait_for_status(answer, "completed")
    conversation_id = chat.conversation_id()
    chat.prompt.fill("half-written follow-up")

    chat.page.get_by_role("button", name="New chat", exact=True).click()
    expect(chat.prompt).to_have_value("")
    chat.page.goto(f"/c/{conversation_id}/")
    chat.wait_ready()
    expect(chat.prompt).to_have_value("half-written follow-up")

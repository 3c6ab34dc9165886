"""A new chat's title reaches the page when it is written, however late (issue 25, item 3).

A title is the product's own work on Celery (chat.tasks.after_answer): a worker may pick it up seconds
after the answer ended, and the model's better title replaces the first one later still. The page
looked for a title only once, 400 ms after the answer's end, and ignored the `conversation` frame that
announces it (docs/chat-protocol.md), so a chat whose title came later stayed "New chat" in the sidebar
and the header until a reload. Here the server queues its tasks where nothing runs them, and the test
runs the title task itself once the answer has ended, as a late worker does."""

from __future__ import annotations

import threading

import pytest
from django import db
from playwright.sync_api import expect

from chat.models import Conversation
from chat.tasks import after_answer
from chat.titles import fallback_title
from tests.e2e.chatpage import TIMEOUT
from tests.e2e.conftest import DESKTOP, PHONE
from tests.support.servers import start_daphne

pytestmark = pytest.mark.e2e

QUESTION = " ".join(
    f"Sentence {n} about the lighthouses of the Breton coast and the keepers who watched them." for n in range(1, 9)
)


@pytest.fixture(scope="module")
def late_title_server(django_db_setup, django_db_blocker, e2e_engine):
    """The e2e server with its Celery tasks queued on a broker in its own memory, which nothing reads."""
    server = start_daphne(
        engine_url=e2e_engine.url,
        extra_env={"SGLANG_SIMULATED": "1", "CELERY_TASK_ALWAYS_EAGER": "0", "CELERY_BROKER_URL": "memory://"},
    )
    yield server
    server.stop()


def run_title_task(conversation_id: int) -> None:
    """The worker's turn, off the test's thread (Playwright keeps an event loop there, and the task
    announces the title through the channel layer)."""
    failures: list[BaseException] = []

    def work() -> None:
        try:
            after_answer(conversation_id, ask_model=False)
        except BaseException as exc:  # re-raised on the test's thread
            failures.append(exc)
        finally:
            db.connections.close_all()  # this thread's own: the test database is dropped at the end

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and not failures, failures


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_stopped_first_answers_title_reaches_the_sidebar_and_header_when_written(
    open_chat, late_title_server, viewport
):
    chat = open_chat(server=late_title_server, viewport=viewport)
    answer = chat.send(QUESTION)
    chat.wait_for_answer_text(answer, 20)
    chat.stop_button.click()
    assert chat.wait_for_status(answer, "stopped", "completed") == "stopped"
    conversation_id = chat.conversation_id()
    header = chat.page.locator("#convo-title")
    # By id: on a phone the sidebar is off screen, and out of the accessibility tree, until opened.
    item = chat.page.locator(f"#conv-list li.conv-item[data-id='{conversation_id}'] .conv-title")
    expect(item).to_have_text("New chat", timeout=TIMEOUT)
    chat.page.wait_for_timeout(1000)  # the page's own look at the sidebar after the end is over
    assert Conversation.objects.get(pk=conversation_id).title == ""  # no worker has run the task yet

    run_title_task(conversation_id)

    title = fallback_title(QUESTION)
    assert Conversation.objects.get(pk=conversation_id).title == title
    # Without a reload: the `conversation` frame brings it.
    expect(header).to_have_text(title, timeout=TIMEOUT)
    expect(item).to_have_text(title, timeout=TIMEOUT)
    if viewport is PHONE:
        chat.page.get_by_role("button", name="Show conversations").click()
        expect(chat.sidebar).to_be_in_viewport(ratio=0.9)
    expect(item).to_be_visible()
    assert chat.page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]

"""Premium requests overtake free ones in the engine's own queue, end to end through Daphne.

A simulated worker with SGLang's --enable-priority-scheduling runs one request at a time: free answers
queue behind the first one, and a premium answer sent after them is served next, because the product
sends each request's plan priority and the engine orders its queue by it. Without the flag the engine
serves them in arrival order (the control).
"""

from __future__ import annotations

import threading

import pytest

from harness.engines import start_simulator
from tests.chat.live import ChatClient
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.django_db(transaction=True)


def first_tokens_in_order(answers: list[tuple[ChatClient, int]]) -> list[int]:
    """The answers' ids in the order their first token reached a reader (all read at once)."""
    order: list[int] = []
    lock = threading.Lock()

    def read(client: ChatClient, message_id: int) -> None:
        for event in client.events(message_id):
            if event.kind == "delta":
                with lock:
                    order.append(message_id)
                return

    readers = [threading.Thread(target=read, args=answer) for answer in answers]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=120)
    return order


@pytest.mark.parametrize("priority_scheduling", [True, False], ids=["priority-scheduling", "arrival-order"])
def test_a_premium_answer_overtakes_queued_free_ones(user, other_user, priority_scheduling):
    flags = ["--enable-priority-scheduling"] if priority_scheduling else []
    # Each answer takes seconds, so all four are sent while the first one still runs.
    worker = start_simulator(
        "--accept-any-model",
        "--max-running-requests",
        "1",
        "--min-answer-tokens",
        "150",
        "--max-answer-tokens",
        "200",
        *flags,
        speed="slow",
    )
    server = start_daphne(engine_url=worker.url, extra_env={"CHAT_HEARTBEAT_TTL_SECONDS": "2"})
    # One person of each tier fills the engine: the plans' answers-at-once limits are not the subject.
    put_on_plan(user, "free", answers_at_once=100)
    put_on_plan(other_user, "plus", answers_at_once=100)
    free, premium = ChatClient(server, user), ChatClient(server, other_user)
    answers: list[tuple[ChatClient, int]] = []
    try:
        free_ids = [free.send_ok(f"Free question {i}.")["assistant_message"]["id"] for i in range(3)]
        premium_id = premium.send_ok("Premium question.")["assistant_message"]["id"]
        answers = [*((free, m) for m in free_ids), (premium, premium_id)]
        order = first_tokens_in_order(answers)
        if priority_scheduling:
            # The first free answer was already running; the premium one goes straight after it.
            assert order == [free_ids[0], premium_id, free_ids[1], free_ids[2]]
        else:
            assert order == [*free_ids, premium_id]
    finally:
        for client, message_id in answers:  # the order is known: no need to wait for the rest
            client.http.post(f"/chat/api/messages/{message_id}/stop")
        free.close()
        premium.close()
        server.stop()
        worker.stop()

"""Premium requests waiting for an admission place hold no database connection (issue 23): with every
place taken, paid sends wait their bounded time for one, and meanwhile the process's small pool still
serves everyone else. Before, each waiter slept in its request thread holding a pooled connection: two
of them emptied a pool of two, and every other request was refused 503 for the length of the wait."""

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.faults.invariants import assert_invariants
from tests.faults.support import first_events, send_accepted
from tests.support.live_fixtures import METRICS_TOKEN
from tests.support.waiting import wait_until

POOL = {"DATABASE_POOL_MIN_SIZE": "1", "DATABASE_POOL_MAX_SIZE": "2", "DATABASE_POOL_TIMEOUT_SECONDS": "1"}
#: One place in all, and a premium request waits up to 8 s for it.
ONE_PLACE = {
    "ADMISSION_SOFT_LIMIT": "1",
    "ADMISSION_HARD_LIMIT": "1",
    "ADMISSION_PREMIUM_WAIT_SECONDS": "8",
    "ADMISSION_WAIT_POLL_SECONDS": "0.1",
    "METRICS_TOKEN": METRICS_TOKEN,
}
#: Long enough to hold the one place while the others wait.
LONGER = ("--min-answer-tokens", "600", "--max-answer-tokens", "600")
WAITERS = 3


def waiting(server) -> float:
    scraped = httpx.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=5)
    for line in scraped.text.splitlines():
        if line.startswith("sglchat_admission_waiting "):
            return float(line.split()[1])
    return 0.0


def test_paid_sends_waiting_for_a_place_leave_the_pool_to_everyone_else(stack, pro_user, accepted):
    engine = stack.engine(*LONGER)
    server = stack.server(engine.url, **POOL, **ONE_PLACE)
    chat = stack.client(server, pro_user)
    running = send_accepted(chat, accepted)["assistant_message"]["id"]
    first_events(chat, running)  # it holds the one place

    # Follow-ups in chats that exist: the send reads its conversation before it asks for a place.
    chats = [chat.http.post("/chat/api/conversations", json={}).json()["id"] for _ in range(WAITERS)]
    with ThreadPoolExecutor(WAITERS) as pool:
        waiters = [
            pool.submit(chat.http.post, "/chat/api/send", json={"content": "Waiting", "conversation_id": c})
            for c in chats
        ]
        wait_until(lambda: waiting(server) == WAITERS, what="every paid send to be waiting for a place")

        for _ in range(3):
            listed = chat.http.get("/chat/api/conversations")
            assert listed.status_code == 200, listed.text[:300]
        assert waiting(server) == WAITERS  # still waiting all along: the pool was free beside them
        ended = [w.result() for w in waiters]

    # The one place stayed taken: each waiter gave up at the end of its wait, with the busy sentence.
    assert [r.status_code for r in ended] == [503] * WAITERS, [r.text[:200] for r in ended]
    assert all(int(r.headers["Retry-After"]) > 0 for r in ended)
    assert " 500 " not in server.log()
    assert_invariants([pro_user], accepted)

"""Premium requests waiting for an admission place hold no database connection (issue 23): with every
place taken, paid sends wait their bounded time for one, and meanwhile the process's small pool still
serves everyone else. Before, each waiter slept in its request thread holding a pooled connection: two
of them emptied a pool of two, and every other request was refused 503 for the length of the wait."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import websockets

from tests.faults.invariants import assert_invariants
from tests.faults.support import first_events, send_accepted
from tests.support.live_fixtures import METRICS_TOKEN
from tests.support.plans import put_on_plan
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


def test_a_paid_websocket_send_waiting_for_a_place_holds_up_no_other_socket(stack, pro_user, other_user, accepted):
    """A WebSocket command's sync work runs on a thread of its own (config.loop_handler.request_threads),
    as an HTTP request's does. Before, every socket's commands shared one thread outside a request: a
    paid send waiting for a place held up every other socket's sends for the length of its wait."""
    put_on_plan(other_user, "free")
    engine = stack.engine(*LONGER)
    server = stack.server(engine.url, **POOL, **ONE_PLACE)
    paid, free = stack.client(server, pro_user), stack.client(server, other_user)
    running = send_accepted(paid, accepted)["assistant_message"]["id"]
    first_events(paid, running)  # it holds the one place

    async def both() -> tuple[dict, float, dict]:
        url = server.ws_url + "/ws/chat/"
        async with (
            websockets.connect(url, additional_headers=paid.ws_headers()) as waiting_socket,
            websockets.connect(url, additional_headers=free.ws_headers()) as other_socket,
        ):
            await waiting_socket.recv(), await other_socket.recv()  # hello
            await waiting_socket.send(json.dumps({"type": "send", "ref": "w", "content": "Waiting"}))
            await asyncio.to_thread(wait_until, lambda: waiting(server) == 1, what="the paid send to be waiting")
            await other_socket.send(json.dumps({"type": "send", "ref": "o", "content": "Meanwhile"}))
            refused = json.loads(await asyncio.wait_for(other_socket.recv(), 30))
            still_waiting = await asyncio.to_thread(waiting, server)
            waited = json.loads(await asyncio.wait_for(waiting_socket.recv(), 30))
            return refused, still_waiting, waited

    refused, still_waiting, waited = asyncio.run(both())
    # The free send was answered (refused: every place is taken) while the paid one still waited.
    assert refused["type"] == "error" and refused["status"] == 503 and refused["ref"] == "o"
    assert still_waiting == 1
    assert waited["type"] == "error" and waited["status"] == 503  # its wait ran out, the place still taken
    assert " 500 " not in server.log()
    assert_invariants([pro_user], accepted)

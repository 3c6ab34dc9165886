"""Every connection of a process's database pool is taken (requests stuck behind a lock): new requests
are answered 503 with Retry-After and a sentence, never 500, and an answer that ends meanwhile keeps
trying its final write until a connection is free again."""

from concurrent.futures import ThreadPoolExecutor

from tests.faults import database
from tests.faults.invariants import assert_invariants
from tests.faults.support import first_events, saved, send_accepted, streamed_text
from tests.support.waiting import wait_until

POOL = {"DATABASE_POOL_MIN_SIZE": "1", "DATABASE_POOL_MAX_SIZE": "2", "DATABASE_POOL_TIMEOUT_SECONDS": "1"}
#: Twice the usual length: it must still be running when the pool runs out, seconds later.
LONGER = ("--min-answer-tokens", "600", "--max-answer-tokens", "600")


def test_an_exhausted_pool_answers_503_with_retry_after_and_an_answer_ending_meanwhile_is_not_lost(
    stack, pro_user, accepted
):
    engine = stack.engine(*LONGER)
    server = stack.server(engine.url, **POOL)
    chat = stack.client(server, pro_user)
    answer_id = send_accepted(chat, accepted)["assistant_message"]["id"]
    seen = first_events(chat, answer_id)

    # Listing conversations reads chat_conversation; the answer's final write never does. Locked, the
    # two listings hold both of the process's connections until the lock goes.
    holder = database.connect()
    admin = database.connect(autocommit=True)
    with ThreadPoolExecutor(2) as pool:
        try:
            holder.execute("LOCK TABLE chat_conversation IN ACCESS EXCLUSIVE MODE")
            stuck = [pool.submit(chat.http.get, "/chat/api/conversations") for _ in range(2)]
            wait_until(lambda: len(database.waiting_on_locks(admin)) == 2, what="both pooled connections to be held")

            for method, path, body in (
                ("GET", "/chat/api/conversations", None),
                ("POST", "/chat/api/send", {"content": "Anyone?"}),
            ):
                refused = chat.http.request(method, path, json=body)
                assert refused.status_code == 503, (path, refused.status_code, refused.text[:300])
                assert int(refused.headers["Retry-After"]) > 0
                assert "busy" in refused.json()["error"]["message"]
            # The answer ends while no connection is free: its final write fails, and is tried again.
            wait_until(
                lambda: f"final write of message {answer_id} failed" in server.log(),
                timeout=60,
                what="the final write to find the pool empty",
            )
        finally:
            holder.rollback()
            holder.close()
            admin.close()
        assert [f.result().status_code for f in stuck] == [200, 200]

    rest, final, _ = chat.answer(answer_id, last_event_id=seen[-1].id)
    answer = saved(answer_id)
    assert final["status"] == answer.status == "completed"
    assert answer.content == streamed_text(seen) + rest
    assert " 500 " not in server.log()
    assert_invariants([pro_user], accepted)

"""PostgreSQL drops the connections of the final write of an answer (a failover, an administrator's
pg_terminate_backend): the write is retried on a new connection and the answer is not lost."""

from tests.faults import database
from tests.faults.invariants import assert_invariants
from tests.faults.support import first_events, saved, send_accepted, streamed_text
from tests.support.waiting import wait_until


def test_connections_cut_during_the_final_write_are_retried_and_the_answer_is_kept_whole(stack, pro_user, accepted):
    engine = stack.engine()
    server = stack.server(engine.url)
    chat = stack.client(server, pro_user)
    answer_id = send_accepted(chat, accepted)["assistant_message"]["id"]
    seen = first_events(chat, answer_id)

    # Hold the answer's row, so its final write waits on it, and cut every connection of the server that
    # waits there (a heartbeat's checkpoint too) until the final write has been cut twice; then let go.
    holder = database.connect()
    admin = database.connect(autocommit=True)

    def cut_twice() -> bool:
        database.terminate(admin, database.waiting_on_locks(admin))
        return f"final write of message {answer_id} failed (try 2)" in server.log()

    try:
        holder.execute("SELECT id FROM chat_message WHERE id = %s FOR UPDATE", (answer_id,))
        wait_until(cut_twice, timeout=60, what="the final write to be cut twice")
    finally:
        holder.rollback()
        holder.close()
        admin.close()

    rest, final, _ = chat.answer(answer_id, last_event_id=seen[-1].id)
    answer = saved(answer_id)
    assert final["status"] == answer.status == "completed"
    assert answer.content == streamed_text(seen) + rest and answer.completion_tokens > 0
    assert "giving up" not in server.log()
    assert_invariants([pro_user], accepted)

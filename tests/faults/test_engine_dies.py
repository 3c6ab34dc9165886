"""The engine process dies in the middle of an answer."""

from harness.engines import start_simulator
from tests.faults.invariants import assert_invariants
from tests.faults.support import first_events, saved, send_accepted, streamed_text
from tests.support.waiting import wait_until


def test_an_engine_that_dies_mid_answer_ends_it_failed_with_its_text_and_a_new_engine_serves_the_regeneration(
    stack, pro_user, accepted
):
    engine = stack.engine()
    server = stack.server(engine.url)
    chat = stack.client(server, pro_user)
    turn = send_accepted(chat, accepted)
    answer_id = turn["assistant_message"]["id"]
    seen = first_events(chat, answer_id)

    engine.kill()

    rest, final, _ = chat.answer(answer_id, last_event_id=seen[-1].id)
    assert final["status"] == "failed"
    assert final["error"] and "Traceback" not in final["error"]
    assert saved(answer_id).content == streamed_text(seen) + rest  # what the reader saw is what is kept
    assert streamed_text(seen)

    # The engine comes back where it was; the same server (never restarted) serves a regeneration.
    stack.processes.append(start_simulator("--accept-any-model", speed="slow", port=int(engine.url.rsplit(":", 1)[1])))
    regenerated = wait_until(
        lambda: (r := chat.http.post(f"/chat/api/messages/{answer_id}/regenerate")).status_code == 201 and r.json(),
        what="the regeneration to be accepted once the engine is back",
    )
    accepted.add(regenerated)
    text, final, _ = chat.answer(regenerated["assistant_message"]["id"])
    assert final["status"] == "completed" and text

    assert_invariants([pro_user], accepted)

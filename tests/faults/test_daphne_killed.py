"""A Daphne process is killed (SIGKILL: no cleanup) while it writes an answer."""

from asgiref.sync import async_to_sync

from chat.generation.reap import INTERRUPTED_ERROR, reap_stalled
from tests.faults.invariants import assert_invariants
from tests.faults.support import first_events, saved, send_accepted, streamed_text
from tests.support.waiting import wait_until


def test_a_killed_server_leaves_the_answer_to_the_reaper_and_the_user_sees_its_text_and_regenerates(
    stack, pro_user, accepted
):
    engine = stack.engine()
    doomed = stack.server(engine.url)
    chat = stack.client(doomed, pro_user)
    turn = send_accepted(chat, accepted)
    answer_id = turn["assistant_message"]["id"]
    seen = first_events(chat, answer_id)

    doomed.kill()

    # Celery beat's reaper (chat.tasks.reap_stalled_generations), run here as beat runs it: it acts once
    # the dead runner's heartbeat has expired.
    reaped = wait_until(lambda: async_to_sync(reap_stalled)(), timeout=30, what="the reaper to find the dead runner")
    assert reaped == [answer_id]
    answer = saved(answer_id)
    assert answer.status == "interrupted" and answer.error == INTERRUPTED_ERROR
    assert answer.content.startswith(streamed_text(seen)) and answer.content

    # The user, on the server that took over, sees the partial text and the reason, and regenerates.
    survivor = stack.server(engine.url)
    browser = stack.client(survivor, pro_user)
    shown = browser.message(turn["conversation"]["id"], answer_id)
    assert shown["status"] == "interrupted" and shown["content"] == answer.content and shown["error"]
    # A reader who was following it gets its end, with the text, from the new server.
    text, final, _ = browser.answer(answer_id)
    assert final["status"] == "interrupted" and final["content"] == answer.content
    response = browser.http.post(f"/chat/api/messages/{answer_id}/regenerate")
    assert response.status_code == 201, response.text
    regenerated = accepted.add(response.json())
    text, final, _ = browser.answer(regenerated["assistant_message"]["id"])
    assert final["status"] == "completed" and text

    # Running the reaper again changes nothing.
    assert async_to_sync(reap_stalled)() == []
    assert_invariants([pro_user], accepted)

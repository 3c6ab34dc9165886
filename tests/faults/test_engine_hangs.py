"""The engine stops answering without closing anything: the first-token and between-token timeouts
end the answer (failed, with whatever text it had) instead of leaving it hanging."""

from tests.faults.invariants import assert_invariants
from tests.faults.support import ended, first_events, send_accepted, streamed_text

#: The product's engine timeouts, short for the test (production: 120 s and 60 s).
TIMEOUTS = {"ENGINE_FIRST_TOKEN_TIMEOUT_SECONDS": "2", "ENGINE_BETWEEN_TOKENS_TIMEOUT_SECONDS": "2"}


def test_an_engine_that_never_sends_a_first_token_fails_the_answer_when_the_first_token_timeout_fires(
    stack, pro_user, accepted
):
    engine = stack.engine("--fault-hang", wait_healthy=False)  # a hung engine fails its own health check
    server = stack.server(engine.url, **TIMEOUTS)
    chat = stack.client(server, pro_user)
    answer_id = send_accepted(chat, accepted)["assistant_message"]["id"]

    answer = ended(answer_id, timeout=30, what="the first-token timeout to end the answer")
    assert answer.status == "failed"
    assert answer.error == "The model server took too long to answer. Try again."
    assert answer.content == ""
    text, final, _ = chat.answer(answer_id)  # a reader is told the same, and the stream ends
    assert final["status"] == "failed" and final["error"] == answer.error and text == ""
    assert_invariants([pro_user], accepted)


def test_an_engine_that_stops_between_tokens_fails_the_answer_with_its_text_when_the_gap_timeout_fires(
    stack, pro_user, accepted
):
    engine = stack.engine("--fault-hang-after-tokens", "40")
    server = stack.server(engine.url, **TIMEOUTS)
    chat = stack.client(server, pro_user)
    answer_id = send_accepted(chat, accepted)["assistant_message"]["id"]
    seen = first_events(chat, answer_id, count=1)

    answer = ended(answer_id, timeout=30, what="the between-token timeout to end the answer")
    assert answer.status == "failed"
    assert answer.error == "The model server took too long to answer. Try again."
    assert answer.content.startswith(streamed_text(seen)) and answer.content
    text, final, _ = chat.answer(answer_id)
    assert final["status"] == "failed" and text == answer.content
    assert_invariants([pro_user], accepted)

"""An engine that answers its health check but fails every generation: after a few failures in a row
the node is marked down (users are told plainly instead of failing one answer after another), the
poller keeps it down while generations still fail, and it comes back up once they work again."""

import pytest
from django.conf import settings

from harness.engines import start_simulator
from inference.environment import forget_sync
from inference.health import poll_nodes
from inference.models import InferenceNode
from inference.routing import NO_NODE
from tests.faults.invariants import assert_invariants
from tests.faults.support import ended
from tests.support.waiting import wait_until

ENGINE_ERROR = "The model server hit an error while answering. Try again."


@pytest.fixture
def one_node(settings):
    def configure(url: str) -> str:
        settings.INFERENCE_NODES = [f"gpu1={url}"]
        forget_sync()  # the test process plays Celery beat's poller over the same rows
        return settings.INFERENCE_NODES[0]

    yield configure
    forget_sync()


def _node() -> InferenceNode:
    return InferenceNode.objects.get(name="gpu1")


def test_a_node_failing_every_request_is_marked_down_users_are_told_and_it_comes_back_when_healed(
    stack, pro_user, accepted, one_node
):
    engine = stack.engine("--fault-error-rate", "1.0")
    nodes = one_node(engine.url)
    server = stack.server(engine.url, INFERENCE_NODES=nodes)
    chat = stack.client(server, pro_user)
    poll_nodes()
    assert _node().health == "up"  # its /health answers: only generations fail

    # Each request fails with a sentence; the INFERENCE_DOWN_AFTER-th failure in a row marks the node down.
    for attempt in range(settings.INFERENCE_DOWN_AFTER):
        turn = accepted.add(chat.send_ok(f"Question {attempt}"), f"Question {attempt}")
        answer = ended(turn["assistant_message"]["id"])
        assert answer.status == "failed" and answer.error == ENGINE_ERROR
    assert _node().health == "down"
    assert "generation requests in a row failed" in _node().last_error

    # Once the server's view of the fleet is refreshed (at most a second), sends are refused plainly.
    def refused_or_recorded():
        response = chat.send("One more?")
        if response.status_code == 201:  # sent in that second: it fails like the others
            accepted.add(response.json(), "One more?")
            assert ended(response.json()["assistant_message"]["id"]).status == "failed"
            return None
        return response

    refused = wait_until(refused_or_recorded, what="sends to be refused while the node is down")
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) > 0
    assert refused.json()["error"]["message"] == NO_NODE

    # Its health check passes, but the poller does not bring it back while generations fail.
    for _ in range(settings.INFERENCE_UP_AFTER + 1):
        poll_nodes()
    assert _node().health == "down"

    # Healed (restarted without the fault, where it was): the poller brings it back, users are served.
    engine.stop()
    stack.processes.append(start_simulator("--accept-any-model", speed="slow", port=int(engine.url.rsplit(":", 1)[1])))
    wait_until(lambda: poll_nodes() and _node().health == "up", what="the poller to bring the node back")
    response = wait_until(
        lambda: (r := chat.send("Are you back?")).status_code == 201 and r, what="the server to route to it again"
    )
    turn = accepted.add(response.json(), "Are you back?")
    text, final, _ = chat.answer(turn["assistant_message"]["id"])
    assert final["status"] == "completed" and text

    assert_invariants([pro_user], accepted)

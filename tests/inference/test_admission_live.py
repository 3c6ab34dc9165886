"""Tiered admission on the engines' real load, end to end through Daphne.

One simulated worker that runs two requests at a time: premium answers fill it and queue behind,
the poller reads its queue from /metrics, and the server sheds free requests (503, Retry-After)
while it still serves premium ones; when the queue drains, free requests are admitted again.
"""

from __future__ import annotations

import pytest

from chat.models import Message
from harness.engines import start_simulator
from inference import environment, fleet
from inference.health import poll_nodes
from inference.models import InferenceNode
from tests.chat.live import ChatClient, wait_until
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def saturated_fleet(settings):
    worker = start_simulator("--enable-metrics", "--accept-any-model", "--max-running-requests", "2", speed="slow")
    settings.INFERENCE_NODES = [f"gpu1={worker.url}"]
    environment.forget_sync()
    # The server reads the samples afresh for every request (no snapshot cache), so what the test's
    # poll just wrote is what admission sees.
    server = start_daphne(
        engine_url=worker.url,
        extra_env={
            "INFERENCE_NODES": f"gpu1={worker.url}",
            "INFERENCE_FLEET_REFRESH_SECONDS": "0",
            "ENGINE_SOFT_QUEUED_REQUESTS": "2",
            "ENGINE_HARD_QUEUED_REQUESTS": "50",
            "CHAT_HEARTBEAT_TTL_SECONDS": "2",
        },
    )
    try:
        yield server
    finally:
        server.stop()
        worker.stop()
        fleet.invalidate()


def queued() -> int:
    poll_nodes()
    load = next(node.load for node in fleet.snapshot() if node.name == "gpu1")
    return load.waiting_requests if load is not None else -1


def test_free_requests_are_shed_while_premium_ones_are_served_and_come_back_when_load_drops(
    saturated_fleet, user, other_user
):
    # One person of each tier fills the fleet: the plans' answers-at-once limits are not the subject.
    put_on_plan(user, "plus", answers_at_once=100)
    put_on_plan(other_user, "free", answers_at_once=100)
    premium, free = ChatClient(saturated_fleet, user), ChatClient(saturated_fleet, other_user)
    try:
        filling = [premium.send_ok(f"Write a long essay, part {i}.")["assistant_message"]["id"] for i in range(5)]
        fleet.invalidate()
        wait_until(lambda: queued() >= 2, what="the worker's queue to pass the soft threshold")

        shed = free.send("Hello?")
        assert shed.status_code == 503, shed.text
        assert int(shed.headers["Retry-After"]) >= 1
        assert "paid plans go first" in shed.json()["error"]["message"]
        assert not Message.objects.filter(conversation__owner=other_user).exists()  # nothing half-saved

        served = premium.send("One more, please.")
        assert served.status_code == 201, served.text

        for message_id in [*filling, served.json()["assistant_message"]["id"]]:
            premium.http.post(f"/chat/api/messages/{message_id}/stop")
        wait_until(lambda: queued() == 0, what="the worker's queue to drain")
        readmitted = wait_until(
            lambda: (r := free.send("Hello again?")).status_code == 201 and r,
            timeout=10,
            interval=0.5,
            what="free requests to be admitted again",
        )
        _, final, _ = free.answer(readmitted.json()["assistant_message"]["id"])
        assert final["status"] == "completed"
        assert InferenceNode.objects.get(name="gpu1").health == "up"
    finally:
        premium.close()
        free.close()

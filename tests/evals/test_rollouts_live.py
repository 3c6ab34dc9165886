"""Rollouts with real versions and people's answers: a Daphne server, two simulated workers as the old
version (blue) and the new (green), people chatting over HTTP while the test plays the beat that checks
the rollout. A degraded new version (the simulator's labelled --degraded: it fails 30% of requests) is
rolled back; a healthy one gets all the traffic. In both, every person's answer completes: a request the
new version failed before its first token was answered by the old one, and counted against the new."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from chat.models import Message
from evals import rollouts
from evals.models import Rollout
from harness.engines import start_simulator
from inference import fleet, rollout, version_stats
from inference.models import InferenceNode, ModelRoute
from tests.chat.conftest import _settle_down
from tests.chat.live import ChatClient
from tests.support.accounts import make_staff
from tests.support.people import answers_by, ask_until
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.django_db(transaction=True)

#: How soon a server reads the routes again after a rollout changes them (its INFERENCE_FLEET_REFRESH_SECONDS).
REFRESH_SECONDS = 1


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, engine):
    server = start_daphne(engine_url=engine.url, extra_env={"INFERENCE_FLEET_REFRESH_SECONDS": str(REFRESH_SECONDS)})
    yield server
    server.stop()


@pytest.fixture
def people(server, user):
    # Many quick new chats while a passed-over node's few seconds run out: more than a person asks a minute.
    put_on_plan(user, "pro", requests_per_minute=10_000, new_chats_per_day=100_000)
    client = ChatClient(server, user)
    yield client
    _settle_down(client)
    client.close()


def _versions(blue_url: str, green_url: str) -> None:
    InferenceNode.objects.create(name="blue-1", base_url=blue_url, group="blue")
    InferenceNode.objects.create(name="green-1", base_url=green_url, group="green")
    ModelRoute.objects.create(model="sim-small", group="blue", weight=100)
    ModelRoute.objects.create(model="sim-small", group="green", weight=0)
    fleet.invalidate()
    rollout.invalidate()


def _start(staff) -> Rollout:
    return rollouts.start_rollout(
        model="sim-small",
        from_group="blue",
        to_group="green",
        steps=[50, 100],
        window_seconds=0,
        min_answers=3,
        max_error_rate=0.05,
        actor=staff,
    )


def test_a_rollout_to_a_degraded_version_rolls_back_and_no_one_sees_a_failed_answer(people):
    staff = make_staff("release@example.com")
    with (
        start_simulator("--echo", "--accept-any-model") as blue,
        start_simulator("--echo", "--accept-any-model", "--degraded") as green,
    ):
        _versions(blue.url, green.url)
        conducted = _start(staff)
        started = conducted.step_started.timestamp()

        answers = ask_until(
            people,
            lambda: (
                version_stats.totals(["green-1"], started)[1] >= 1
                and answers_by("green-1", conducted.step_started) >= 3
            ),
        )
        assert rollouts.check_rollout(conducted) == "rolled back"

        conducted.refresh_from_db()
        assert conducted.status == Rollout.Status.ROLLED_BACK and conducted.reason.startswith("Error rate ")
        assert dict(ModelRoute.objects.values_list("group", "weight")) == {"blue": 100, "green": 0}
        # The server reads the routes again within its INFERENCE_FLEET_REFRESH_SECONDS: from then on, every
        # new question is answered by the old version.
        seen = timezone.now() + timedelta(seconds=REFRESH_SECONDS)
        answers += ask_until(people, lambda: Message.objects.filter(role="assistant", created__gte=seen).count() >= 3)
        assert not Message.objects.filter(role="assistant", created__gte=seen, node="green-1").exists()

    assert {answer["status"] for answer in answers} == {"completed"}  # no one saw a failed answer


def test_a_rollout_to_a_healthy_version_gives_it_all_the_traffic(people):
    staff = make_staff("release@example.com")
    with (
        start_simulator("--echo", "--accept-any-model") as blue,
        start_simulator("--echo", "--accept-any-model") as green,
    ):
        _versions(blue.url, green.url)
        conducted = _start(staff)

        answers = ask_until(people, lambda: answers_by("green-1", conducted.step_started) >= 3)
        assert rollouts.check_rollout(conducted) == "advanced"
        assert conducted.share == 100

        answers += ask_until(people, lambda: answers_by("green-1", conducted.step_started) >= 3)
        assert rollouts.check_rollout(conducted) == "completed"

    conducted.refresh_from_db()
    assert conducted.status == Rollout.Status.COMPLETED
    assert dict(ModelRoute.objects.values_list("group", "weight")) == {"blue": 0, "green": 100}
    assert {answer["status"] for answer in answers} == {"completed"}

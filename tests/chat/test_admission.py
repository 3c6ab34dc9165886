"""Admission by tier on the engines' real load and the product's own count, in process."""

from __future__ import annotations

import threading

import pytest

from chat.generation import admission
from chat.generation.admit import admit_prompt, hold, release_holds
from chat.generation.assemble import Prompt
from chat.generation.start import start_turn
from chat.generation.turn import resolve_turn
from chat.models import Message
from config.refusals import Busy
from inference.fleet import NodeView
from inference.loads import EngineLoad
from tests.inference.helpers import node_view
from tests.support.plans import put_on_plan
from tests.support.waiting import wait_until


def node(name: str, model: str = "sim-small", *, waiting: int | None = 0) -> NodeView:
    load = (
        None
        if waiting is None
        else EngineLoad(running_requests=8, waiting_requests=waiting, used_tokens=0, token_usage=0.2)
    )
    return node_view(name, models=(model,), load=load)


@pytest.fixture(autouse=True)
def _limits(settings, monkeypatch):
    settings.REDIS_URL = ""  # the count in this process's memory: each test starts from zero
    settings.ADMISSION_SOFT_LIMIT, settings.ADMISSION_HARD_LIMIT = 100, 200
    settings.ENGINE_SOFT_QUEUED_REQUESTS, settings.ENGINE_HARD_QUEUED_REQUESTS = 4, 16
    settings.ADMISSION_PREMIUM_WAIT_SECONDS, settings.ADMISSION_WAIT_POLL_SECONDS = 0.0, 0.01
    monkeypatch.setattr("inference.rollout.all_routes", lambda: {})
    admission._local.clear()
    yield
    admission._local.clear()


@pytest.fixture
def engines(monkeypatch):
    """The fleet the router and admission see; tests set its nodes."""
    fleet: list[NodeView] = []
    monkeypatch.setattr("inference.routing.snapshot", lambda: fleet)
    return fleet


def turn_on(user, slug: str, model: str | None = None, **plan_changes):
    put_on_plan(user, slug, **plan_changes)
    return resolve_turn(user, model)


def test_idle_engines_admit_everyone(user, engines):
    engines[:] = [node("a", waiting=0)]
    admission.admit_request(turn_on(user, "free"), "g1")
    assert admission.in_flight() == 1


def test_past_the_soft_threshold_free_is_refused_and_premium_served(user, other_user, engines):
    engines[:] = [node("a", waiting=5), node("b", waiting=6)]
    with pytest.raises(Busy) as shed:
        admission.admit_request(turn_on(user, "free"), "free-1")
    assert shed.value.status == 503 and shed.value.retry_after
    assert "paid plans go first" in shed.value.message
    admission.admit_request(turn_on(other_user, "plus"), "premium-1")
    assert admission.in_flight() == 1


def test_one_idle_node_is_enough_room(user, engines):
    engines[:] = [node("a", waiting=20), node("b", waiting=0)]
    admission.admit_request(turn_on(user, "free"), "g1")


def test_past_the_hard_threshold_nobody_is_admitted(user, other_user, engines):
    engines[:] = [node("a", waiting=16)]
    with pytest.raises(Busy) as refused:
        admission.admit_request(turn_on(other_user, "plus"), "premium-1")
    assert "Every model server is busy" in refused.value.message
    with pytest.raises(Busy):
        admission.admit_request(turn_on(user, "free"), "free-1")
    assert admission.in_flight() == 0


def test_premium_waits_a_bounded_time_for_a_place_and_gets_it_when_load_drops(user, engines, settings, monkeypatch):
    settings.ADMISSION_PREMIUM_WAIT_SECONDS = 30.0
    engines[:] = [node("a", waiting=16)]
    polls = []

    def load_drops(seconds, **kwargs):
        polls.append(seconds)
        if len(polls) == 3:
            engines[:] = [node("a", waiting=1)]

    monkeypatch.setattr(admission._line, "wait", load_drops)
    admission.admit_request(turn_on(user, "plus"), "premium-1")
    assert len(polls) == 3 and admission.in_flight() == 1


def test_free_requests_do_not_wait(user, engines, settings, monkeypatch):
    settings.ADMISSION_PREMIUM_WAIT_SECONDS = 30.0
    engines[:] = [node("a", waiting=16)]
    monkeypatch.setattr(admission._line, "wait", lambda s, **kw: pytest.fail("a free request waited"))
    with pytest.raises(Busy):
        admission.admit_request(turn_on(user, "free"), "free-1")


def test_without_fresh_samples_the_products_own_count_decides(user, other_user, engines, settings):
    engines[:] = [node("a", waiting=None)]
    settings.ADMISSION_SOFT_LIMIT, settings.ADMISSION_HARD_LIMIT = 0, 1
    with pytest.raises(Busy):
        admission.admit_request(turn_on(user, "free"), "free-1")
    admission.admit_request(turn_on(other_user, "plus"), "premium-1")
    with pytest.raises(Busy):
        admission.admit_request(turn_on(other_user, "plus"), "premium-2")


class TestWaitingLine:
    """Premium requests past the hard threshold wait in a line of bounded length, each woken as soon as
    a place is given back in its process (issue 23: 150 waiters polling every quarter second took the
    CPU the answers needed, and their refusals came seconds late)."""

    @pytest.fixture(autouse=True)
    def _one_place(self, settings, engines):
        engines[:] = [node("a", waiting=0)]
        settings.ADMISSION_SOFT_LIMIT = settings.ADMISSION_HARD_LIMIT = 1
        settings.ADMISSION_PREMIUM_WAIT_SECONDS = 60.0
        # Longer than any test waits: a waiter admitted was woken by the place given back, not a poll.
        settings.ADMISSION_WAIT_POLL_SECONDS = 60.0
        settings.ADMISSION_PREMIUM_WAITERS = 1

    def waiter(self, turn, generation_id):
        """admit_request in a thread (as a request's): returns the thread and what it ended with."""
        outcome: list[object] = []

        def wait_for_a_place():
            try:
                admission.admit_request(turn, generation_id)
                outcome.append("admitted")
            except Busy as busy:
                outcome.append(busy)

        thread = threading.Thread(target=wait_for_a_place)
        thread.start()
        wait_until(lambda: admission._line.waiting == 1, what="the premium request to wait in line")
        return thread, outcome

    def test_a_place_given_back_wakes_the_request_waiting_for_it(self, db, user, other_user):
        admission.admit_request(turn_on(user, "plus"), "running")
        thread, outcome = self.waiter(turn_on(other_user, "plus"), "waiting")
        admission.release_now("running")
        thread.join(30)
        assert outcome == ["admitted"]
        assert admission.in_flight() == 1 and admission._line.waiting == 0

    def test_past_the_lines_length_a_premium_request_is_refused_at_once(self, db, user, other_user, monkeypatch):
        admission.admit_request(turn_on(user, "plus"), "running")
        turn = turn_on(other_user, "plus")
        thread, outcome = self.waiter(turn, "waiting")
        waited_here = []
        wait = admission._line.wait

        def recorded(seconds, **kwargs):
            if threading.current_thread() is threading.main_thread():
                waited_here.append(seconds)
            wait(seconds, **kwargs)

        monkeypatch.setattr(admission._line, "wait", recorded)
        try:
            with pytest.raises(Busy) as refused:
                admission.admit_request(turn, "one-more")
            assert waited_here == []  # refused without waiting: the line was full
            assert refused.value.status == 503 and refused.value.retry_after
            assert admission._line.waiting == 1  # the first is still in line, unharmed
        finally:
            admission.release_now("running")
            thread.join(30)
        assert outcome == ["admitted"]


class TestRefusedEarly:
    """At busy times a send that admission would refuse is refused before the work of admitting it, on
    the count this process's last admission saw (issue 23: at three times capacity the refusals took
    the CPU the accepted answers needed)."""

    @pytest.fixture(autouse=True)
    def _no_work(self, monkeypatch, engines):
        engines[:] = [node("a", waiting=0)]
        # The count seen by `busy()` stays fresh for the whole test, however slow the machine.
        monkeypatch.setattr(admission._LastCount, "FRESH_SECONDS", 600.0)

        def worked(*args, **kwargs):
            pytest.fail("the refused send was screened or searched its files first")

        monkeypatch.setattr("chat.generation.start._retrieve", worked)
        monkeypatch.setattr("chat.generation.admit.screen", worked)

    @pytest.fixture
    def busy(self, other_user):
        """Someone else's request was just refused by admission: the count it saw is fresh."""

        def seen():
            with pytest.raises(Busy):
                admission.admit_request(turn_on(other_user, "free"), "someone-else")

        return seen

    def test_a_free_send_past_the_soft_limit(self, user, settings, busy, django_assert_max_num_queries):
        put_on_plan(user, "free")
        settings.ADMISSION_SOFT_LIMIT = 0
        busy()
        with django_assert_max_num_queries(4), pytest.raises(Busy) as shed:
            start_turn(user, content="Hello there")
        assert shed.value.status == 503 and "paid plans go first" in shed.value.message
        assert shed.value.as_dict()["retry_schedule"][0] == 10  # the free back-off, as admission gives it
        assert not Message.objects.filter(conversation__owner=user).exists()

    def test_a_premium_send_past_the_hard_limit_when_the_line_is_full(self, user, settings, busy):
        put_on_plan(user, "plus")
        settings.ADMISSION_SOFT_LIMIT = settings.ADMISSION_HARD_LIMIT = 0
        settings.ADMISSION_PREMIUM_WAIT_SECONDS, settings.ADMISSION_PREMIUM_WAITERS = 30.0, 0
        busy()
        with pytest.raises(Busy) as refused:
            start_turn(user, content="Hello there")
        assert "Every model server is busy" in refused.value.message

    def test_not_a_premium_send_that_may_still_wait(self, user, settings, busy):
        put_on_plan(user, "plus")
        settings.ADMISSION_SOFT_LIMIT = settings.ADMISSION_HARD_LIMIT = 0
        settings.ADMISSION_PREMIUM_WAIT_SECONDS = 30.0
        busy()
        with pytest.raises(pytest.fail.Exception, match="screened or searched"):
            start_turn(user, content="Hello there")  # on to the whole admission, which would wait

    def test_not_without_a_count_seen_by_an_admission(self, user, settings):
        put_on_plan(user, "free")
        settings.ADMISSION_SOFT_LIMIT = 0
        with pytest.raises(pytest.fail.Exception, match="screened or searched"):
            start_turn(user, content="Hello there")  # no admission seen yet: the whole admission decides

    def test_not_on_a_count_seen_too_long_ago(self, user, settings, busy, monkeypatch):
        put_on_plan(user, "free")
        settings.ADMISSION_SOFT_LIMIT = 0
        busy()
        monkeypatch.setattr(admission._LastCount, "FRESH_SECONDS", 0.0)
        with pytest.raises(pytest.fail.Exception, match="screened or searched"):
            start_turn(user, content="Hello there")

    def test_a_place_given_back_here_counts_at_once(self, user, other_user, settings):
        put_on_plan(user, "free")
        settings.ADMISSION_SOFT_LIMIT = 1
        admission.admit_request(turn_on(other_user, "free"), "running")  # seen: 1, the soft limit
        admission.release_now("running")  # seen: 0, so the next is not refused early
        with pytest.raises(pytest.fail.Exception, match="screened or searched"):
            start_turn(user, content="Hello there")

    def test_not_a_request_a_cache_may_answer(self, user, settings, busy, monkeypatch):
        put_on_plan(user, "free")
        settings.ADMISSION_SOFT_LIMIT = 0
        busy()
        monkeypatch.setattr("chat.generation.semantic_cache.a_cache_may_answer", lambda turn, sampling, **kw: True)
        with pytest.raises(pytest.fail.Exception, match="screened or searched"):
            start_turn(user, content="Hello there")


class TestFallbackModel:
    def plan(self, user):
        return turn_on(user, "free", "sim-large", model_ids=["sim-small", "sim-large"], fallback_model="sim-small")

    def test_a_busy_model_serves_free_requests_with_the_plans_fallback(self, user, engines):
        engines[:] = [node("large", "sim-large", waiting=6), node("small", "sim-small", waiting=0)]
        turn = admission.serve_model(self.plan(user))
        assert turn.model.id == "sim-small"
        admission.admit_request(turn, "g1")  # and the fallback's engines admit it

    def test_no_fallback_when_the_fallback_is_busy_too_or_unknown(self, user, engines):
        turn = self.plan(user)
        engines[:] = [node("large", "sim-large", waiting=6), node("small", "sim-small", waiting=6)]
        assert admission.serve_model(turn).model.id == "sim-large"
        engines[:] = [node("large", "sim-large", waiting=6), node("small", "sim-small", waiting=None)]
        assert admission.serve_model(turn).model.id == "sim-large"

    def test_no_fallback_while_the_model_asked_for_has_room(self, user, engines):
        engines[:] = [node("large", "sim-large", waiting=1), node("small", "sim-small", waiting=0)]
        assert admission.serve_model(self.plan(user)).model.id == "sim-large"

    def test_a_continuation_is_written_on_by_its_own_model_never_the_fallback(self, user, engines):
        """The fallback would write on from another model's half-sentence: busy, the request is refused."""
        engines[:] = [node("large", "sim-large", waiting=6), node("small", "sim-small", waiting=0)]
        turn = self.plan(user)
        prompt = Prompt(messages=[{"role": "user", "content": "Go on."}], estimated_tokens=5, dropped=[])

        with pytest.raises(Busy):
            admit_prompt(turn, question="Go on.", prompt_for=lambda serving: prompt, fallback=False)
        admitted = admit_prompt(turn, question="Go on.", prompt_for=lambda serving: prompt)
        assert admitted.turn.model.id == "sim-small"  # any other answer may take the fallback
        release_holds(admitted.reservation, admitted.rid)

    def test_premium_requests_keep_their_model(self, user, engines):
        turn = turn_on(user, "plus", "sim-large", fallback_model="sim-small")
        engines[:] = [node("large", "sim-large", waiting=6), node("small", "sim-small", waiting=0)]
        assert admission.serve_model(turn).model.id == "sim-large"


@pytest.mark.parametrize(
    ("slug", "schedule"), [("free", [5, 10, 20, 40, 60, 60, 60, 60]), ("plus", [5, 10, 15, 20, 25, 30, 30, 30])]
)
def test_a_refused_send_carries_its_plans_back_off_for_the_page_to_follow(user, engines, slug, schedule):
    """The server decides the waits before each retry of a refused send (free exponentially, paid
    linearly, from the refusal's Retry-After); the page only counts them down (static/chat/refusals.js)."""
    engines[:] = [node("a", waiting=20)]  # past the hard threshold: every class is refused
    turn = turn_on(user, slug)
    with pytest.raises(Busy) as refused:
        hold(turn, prompt_tokens=10, generation_id="g1")
    assert refused.value.retry_after == 5
    assert refused.value.as_dict()["retry_schedule"] == schedule

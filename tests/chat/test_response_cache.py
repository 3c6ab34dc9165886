"""The response cache's rules (chat/generation/response_cache.py), in-process: which requests it may
answer, whose answers it may serve, what a hit holds and what it costs. The answer a first request
kept is written into the cache as the driver keeps it (`response_cache.keep`); the live path, from a
real answer to a replayed one, is tests/api/test_response_cache.py."""

import pytest
from asgiref.sync import async_to_sync

from accounts.api_keys import create_api_key
from api.completions import start
from api.requests import parse
from billing.selectors import current_period
from chat.generation import admission, response_cache
from chat.generation.admit import release_holds
from chat.generation.response_cache import CachedAnswer, Sampling
from chat.generation.start import start_regeneration, start_turn
from chat.generation.turn import resolve_turn
from chat.models import Message
from inference import rollout
from inference.models import ModelRoute
from moderation.models import Category
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

ASKED = {"model": "sim-small", "temperature": 0, "messages": [{"role": "user", "content": "What is 2 + 2?"}]}
ANSWER = CachedAnswer(pieces=["It is", " 4."], finish_reason="stop", prompt_tokens=20, completion_tokens=4)


def _start(user, body=ASKED, cache_header: str = ""):
    key, _ = create_api_key(user, f"key {user.pk}")
    return start(key, parse(body), "127.0.0.1", None, cache_header)


def _kept_from_a_first_request(user, body=ASKED) -> None:
    first = _start(user, body)
    assert first.job.cache_key is not None and first.job.cached is None
    release_holds(first.reservation, first.job.rid)
    async_to_sync(response_cache.keep)(first.job.cache_key, ANSWER)


def _change_plan(user, **changes) -> None:
    """As staff do in the admin (saved: the periods cached per request are dropped)."""
    plan = current_period(user).plan
    for name, value in changes.items():
        setattr(plan, name, value)
    plan.save()


@pytest.fixture
def pro(user):
    put_on_plan(user, "pro")
    return user


def test_a_repeat_is_answered_from_the_cache_and_takes_no_admission_place(pro, settings):
    _kept_from_a_first_request(pro)
    settings.ADMISSION_SOFT_LIMIT = settings.ADMISSION_HARD_LIMIT = 0  # every place is taken

    again = _start(pro)

    assert again.job.cached == ANSWER
    assert again.job.node == "response-cache"  # routed nowhere: no engine is asked
    assert admission.in_flight() == 0
    release_holds(again.reservation, again.job.rid)


def test_only_requests_their_input_decides_are_cached(pro):
    sampled = {**ASKED, "temperature": 0.7}
    seeded = {**sampled, "seed": 7}
    with_tools = {
        **ASKED,
        "tools": [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}],
    }
    for body, cacheable in ((sampled, False), (seeded, True), (with_tools, False), ({**ASKED, "n": 2}, False)):
        generation = _start(pro, body)
        assert (generation.job.cache_key is not None) is cacheable, body
        release_holds(generation.reservation, generation.job.rid)


def test_no_person_is_ever_served_anothers_answer(pro, other_user):
    put_on_plan(other_user, "pro")
    _kept_from_a_first_request(pro)

    theirs = _start(other_user)

    assert theirs.job.cached is None
    release_holds(theirs.reservation, theirs.job.rid)


def test_cache_control_no_cache_answers_afresh_and_no_store_keeps_nothing(pro):
    _kept_from_a_first_request(pro)
    fresh = _start(pro, cache_header="no-cache")
    assert fresh.job.cached is None and fresh.job.cache_key is not None  # answered afresh, then kept
    release_holds(fresh.reservation, fresh.job.rid)
    private = _start(pro, cache_header="max-age=0, no-store")
    assert private.job.cached is None and private.job.cache_key is None
    release_holds(private.reservation, private.job.rid)


def test_a_plan_can_opt_out(pro):
    _kept_from_a_first_request(pro)
    _change_plan(pro, response_cache=False)
    afresh = _start(pro)
    assert afresh.job.cached is None and afresh.job.cache_key is None
    release_holds(afresh.reservation, afresh.job.rid)


def test_a_hit_reserves_what_the_plan_bills_for_it(pro):
    _kept_from_a_first_request(pro)
    _change_plan(pro, cached_answer_percent=50)

    hit = _start(pro)

    assert hit.job.cached == ANSWER
    assert hit.reservation.amount == (20 + 4) // 2  # half the answer's tokens, not prompt + max_tokens
    release_holds(hit.reservation, hit.job.rid)


def test_a_rollout_never_serves_the_other_versions_answer(pro):
    ModelRoute.objects.create(model="sim-small", group="default", weight=100)
    rollout.invalidate()
    _kept_from_a_first_request(pro)

    green = ModelRoute.objects.create(model="sim-small", group="green", weight=10)  # two versions serve it now
    rollout.invalidate()  # as the routes' admin does
    during = _start(pro)
    assert during.job.cached is None and during.job.cache_key is None
    release_holds(during.reservation, during.job.rid)

    # Green alone now: the default group's answers are not its answers.
    ModelRoute.objects.filter(group="default").update(weight=0)
    green.weight = 100
    green.save()
    rollout.invalidate()
    turn = resolve_turn(pro, "sim-small", max_output_tokens=None)
    found = response_cache.look_up(turn, ASKED["messages"], Sampling(temperature=0))
    assert found.key is not None and found.hit is None


def test_a_change_to_the_moderation_policy_clears_it(pro):
    _kept_from_a_first_request(pro)
    Category.objects.create(name="Cache test category", words="buy now")
    again = _start(pro)
    assert again.job.cached is None
    release_holds(again.reservation, again.job.rid)


def test_the_web_chat_caches_only_with_a_fixed_temperature_and_regenerate_always_asks_afresh(pro, settings):
    settings.CHAT_TEMPERATURE = None  # the engine's own sampling: no two answers need be the same
    sampled = start_turn(pro, content="Name a colour.")
    assert sampled.job.cache_key is None
    release_holds(sampled.reservation, sampled.job.rid)

    settings.CHAT_TEMPERATURE = 0.0
    first = start_turn(pro, content="Name a colour.")
    assert first.job.temperature == 0.0 and first.job.cache_key is not None
    release_holds(first.reservation, first.job.rid)
    async_to_sync(response_cache.keep)(first.job.cache_key, ANSWER)
    Message.objects.filter(pk=first.assistant_message.pk).update(status=Message.Status.COMPLETED, content="Red.")

    again = start_turn(pro, content="Name a colour.")  # a new chat, the same prompt
    assert again.job.cached == ANSWER
    release_holds(again.reservation, again.job.rid)
    regenerated = start_regeneration(pro, first.assistant_message.pk)
    assert regenerated.job.cached is None
    release_holds(regenerated.reservation, regenerated.job.rid)

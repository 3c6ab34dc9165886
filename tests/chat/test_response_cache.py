"""The response cache's rules (chat/generation/response_cache.py), in-process: which requests it may
answer, whose answers it may serve, what a hit holds and what it costs. The answer a first request
kept is written into the cache as the driver keeps it (`response_cache.keep`); the live path, from a
real answer to a replayed one, is tests/api/test_response_cache.py."""

import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command

from accounts.api_keys import create_api_key
from api.completions import start
from api.requests import parse
from billing.selectors import current_period
from chat.generation import admission, response_cache, settle
from chat.generation.admit import release_holds
from chat.generation.response_cache import CachedAnswer, Sampling
from chat.generation.start import start_continuation, start_regeneration, start_turn
from chat.generation.turn import resolve_turn
from chat.models import Message
from inference import fleet, rollout
from inference.models import InferenceNode, ModelRoute
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
    epoch = response_cache._epoch()

    # Weights changed without a signal (no clear): what keeps the versions apart is the key alone.
    ModelRoute.objects.bulk_create([ModelRoute(model="sim-small", group="green", weight=10)])
    rollout.invalidate()
    during = _start(pro)
    assert during.job.cached is None and during.job.cache_key is None  # two versions serve it
    release_holds(during.reservation, during.job.rid)

    ModelRoute.objects.filter(group="default").update(weight=0)
    ModelRoute.objects.filter(group="green").update(weight=100)
    rollout.invalidate()
    assert response_cache._epoch() == epoch
    turn = resolve_turn(pro, "sim-small", max_output_tokens=None)
    found = response_cache.look_up(turn, ASKED["messages"], Sampling(temperature=0))
    assert found.key is not None and found.hit is None  # green alone now: the default group's answers are not its


def test_new_weights_on_the_same_nodes_are_another_version(pro, settings):
    settings.INFERENCE_NODES = []
    node = InferenceNode.objects.create(
        name="gpu-1",
        base_url="http://gpu-1.invalid:30000",
        model_ids=["sim-small"],
        health="up",
        capabilities={"tools": True, "weight_version": "2026-11-01"},
    )
    fleet.invalidate()
    turn = resolve_turn(pro, "sim-small", max_output_tokens=None)
    before = response_cache.look_up(turn, ASKED["messages"], Sampling(temperature=0))
    assert before.version == "all-nodes@2026-11-01"

    InferenceNode.objects.filter(pk=node.pk).update(capabilities={"tools": True, "weight_version": "2026-12-01"})
    fleet.invalidate()
    after = response_cache.look_up(turn, ASKED["messages"], Sampling(temperature=0))
    assert after.version == "all-nodes@2026-12-01" and after.key != before.key

    InferenceNode.objects.create(
        name="gpu-2",
        base_url="http://gpu-2.invalid:30000",
        model_ids=["sim-small"],
        health="up",
        capabilities={"weight_version": "2026-11-01"},
    )
    fleet.invalidate()
    mixed = response_cache.look_up(turn, ASKED["messages"], Sampling(temperature=0))
    assert mixed.key is None  # its nodes run two versions: like a rollout, nothing is cached


def test_only_an_answer_the_engine_ended_itself_on_the_version_its_key_names_is_kept():
    assert response_cache.keepable("stop", "default@v1", "default@v1")
    assert response_cache.keepable("length", "default@v1", "default@v1")
    assert not response_cache.keepable("abort", "default@v1", "default@v1")  # cut by an operator or a drain
    assert not response_cache.keepable("stop", "green@v2", "default@v1")  # routed across a route change


def test_a_replay_stopped_midway_is_billed_for_what_was_replayed():
    answer = CachedAnswer(
        pieces=["It is", " four", " exactly."], finish_reason="stop", prompt_tokens=20, completion_tokens=9
    )
    whole = settle._replayed_usage(answer, "It is four exactly.")
    part = settle._replayed_usage(answer, "It is")
    assert (whole.completion_tokens, whole.from_cache) == (9, True)
    assert (part.prompt_tokens, part.completion_tokens, part.from_cache) == (20, 3, True)


def test_when_redis_cannot_say_the_epoch_the_request_is_answered_afresh_and_nothing_kept(pro, settings):
    turn = resolve_turn(pro, "sim-small", max_output_tokens=None)
    fleet.snapshot()  # the nodes as this process last read them
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # Redis gone: nothing listens there
    found = response_cache.look_up(turn, ASKED["messages"], Sampling(temperature=0))
    assert found.key is None and found.hit is None and found.why_not == "unavailable"
    with pytest.raises(response_cache.NotCleared):
        response_cache.clear("a test")
    with pytest.raises(CommandError, match="could not be cleared"):
        call_command("clear_response_cache")


def test_clearing_by_command_without_redis_says_to_restart(settings):
    settings.REDIS_URL = ""
    with pytest.raises(CommandError, match="restart the server"):
        call_command("clear_response_cache")


def test_a_change_to_the_moderation_policy_clears_it_once_committed(pro, django_capture_on_commit_callbacks):
    _kept_from_a_first_request(pro)
    with django_capture_on_commit_callbacks(execute=True):
        Category.objects.create(name="Cache test category", words="buy now")
        before = _start(pro)
        release_holds(before.reservation, before.job.rid)
        assert before.job.cached == ANSWER  # not before the change is committed
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


def test_a_continued_answer_is_neither_answered_nor_kept_by_either_cache(pro, settings):
    """What comes back is the rest of one answer, not an answer to the messages: a cached answer to the
    same question must never stand in for it, and it must never be filed as one."""
    settings.CHAT_TEMPERATURE = 0.0
    first = start_turn(pro, content="Tell me a long story.")
    release_holds(first.reservation, first.job.rid)
    async_to_sync(response_cache.keep)(first.job.cache_key, ANSWER)
    Message.objects.filter(pk=first.assistant_message.pk).update(
        status=Message.Status.COMPLETED, content="Once upon a time", finish_reason="length"
    )

    continued = start_continuation(pro, first.assistant_message.pk)

    assert continued.job.cached is None and continued.job.cache_key is None and continued.job.similar_slot is None
    assert continued.job.continues_answer
    assert continued.job.messages[-1] == {"role": "assistant", "content": "Once upon a time"}
    assert continued.assistant_message.content == "Once upon a time"
    assert continued.assistant_message.continued_chars == len("Once upon a time")
    release_holds(continued.reservation, continued.job.rid)

"""The semantic cache's rules (chat/generation/semantic_cache.py), in-process against the simulated
embedding worker: which first questions it answers, whose earlier questions it may use, what a hit
holds and records. An earlier question's answer is filed as the driver files it (`semantic_cache.keep`);
the live path through the OpenAI SDK and the page is tests/e2e/test_answer_levers.py.

The simulated worker's vectors are word and word-piece hashes, not meaning (simulator/embedding.py):
"What's the capital of France?" is 0.91 alike to "What is the capital of France?", "What is the
population of France?" 0.69. The threshold here is 0.9 so that the first pair meets and the second does not."""

import time

import pytest
from asgiref.sync import async_to_sync

from accounts.api_keys import create_api_key
from api.completions import start
from api.requests import parse, parse_text_completion
from billing.selectors import current_period
from chat.generation import admission, semantic_cache
from chat.generation.admit import release_holds
from chat.generation.response_cache import CachedAnswer
from chat.generation.start import start_regeneration, start_turn
from chat.models import AnswerFeedback, Message, SemanticCachePolicy
from chat.selectors import semantic_cache_report
from config.redis import sync_client
from inference import rollout
from inference.models import ModelRoute
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

FIRST = "What is the capital of France?"
PARAPHRASE = "What's the capital of France?"
NEAR_MISS = "What is the population of France?"  # 0.69 alike: the same specifics ("of france"), under 0.9
ANSWER = CachedAnswer(pieces=["Paris", "."], finish_reason="stop", prompt_tokens=30, completion_tokens=2)


@pytest.fixture
def semantic(settings, retrieval):
    """The simulated embedding worker embeds questions; staff turned the cache on, threshold 0.9."""
    settings.CHAT_TEMPERATURE = None  # the web chat samples: only the semantic cache can answer it
    return SemanticCachePolicy.objects.create(enabled=True, threshold=0.9)


@pytest.fixture
def pro(user):
    put_on_plan(user, "pro")
    return user


def _set(policy: SemanticCachePolicy, **changes) -> None:
    for name, value in changes.items():
        setattr(policy, name, value)
    policy.save()
    semantic_cache.forget_policy()  # as the commit does (a test's transaction never commits)


def _asked(user, question: str, **kwargs):
    turn = start_turn(user, content=question, **kwargs)
    release_holds(turn.reservation, turn.job.rid)
    return turn


def _filed(user, question: str = FIRST, answer: CachedAnswer = ANSWER):
    """`user` asked `question` and its answer was written and filed."""
    turn = _asked(user, question)
    assert turn.job.similar_slot is not None and turn.job.cached is None
    async_to_sync(semantic_cache.keep)(turn.job.similar_slot, answer)
    Message.objects.filter(pk=turn.assistant_message.pk).update(status=Message.Status.COMPLETED, content="Paris.")
    return turn


def test_a_paraphrase_of_an_earlier_first_question_is_answered_from_it_without_an_admission_place(
    pro, semantic, settings
):
    _filed(pro)
    settings.ADMISSION_SOFT_LIMIT = settings.ADMISSION_HARD_LIMIT = 0  # every place is taken

    again = _asked(pro, PARAPHRASE)

    assert again.job.cached == ANSWER and again.job.cache_hit == "similar"
    assert again.job.node == "response-cache"
    assert admission.in_flight() == 0


def test_a_near_miss_below_the_threshold_is_answered_afresh(pro, semantic):
    _filed(pro)
    near = _asked(pro, NEAR_MISS)
    assert near.job.cached is None
    assert near.job.similar_slot is not None  # and filed in turn once written


def test_questions_with_other_numbers_or_operations_never_meet_however_alike(pro, semantic):
    _set(semantic, threshold=0.8)  # "12 times 7" and "12 times 8" are 0.88 alike
    _filed(pro, "What is 12 times 7?")
    _filed(pro, "What is 10 divided by 2?")
    for other in ("What is 12 times 8?", "What is 12 plus 7?", "What is 2 divided by 10?", "What is -12 times 7?"):
        assert _asked(pro, other).job.cached is None, other
    assert _asked(pro, "what is 12 times 7").job.cached == ANSWER


def test_questions_whose_prepositions_govern_other_words_never_meet(pro, semantic):
    _set(semantic, threshold=0.8)
    _filed(pro, "How do I convert Celsius to Fahrenheit?")
    _filed(pro, "What is the capital of Australia?")
    # Word hashes make the first pair identical (1.0) and the second 0.84 alike: they share nearly every word.
    assert _asked(pro, "How do I convert Fahrenheit to Celsius?").job.cached is None
    assert _asked(pro, "What is the capital of Austria?").job.cached is None
    assert _asked(pro, "How can I convert Celsius into Fahrenheit?").job.cached == ANSWER  # "into" is "to"


def test_an_entry_older_than_the_time_to_live_is_not_served(pro, semantic, settings):
    kept = _filed(pro).job.similar_slot
    client = sync_client()
    client.zadd(
        semantic_cache.PREFIX + kept.group + ":t", {kept.entry: time.time() - settings.RESPONSE_CACHE_TTL_SECONDS - 1}
    )
    assert _asked(pro, PARAPHRASE).job.cached is None


def test_the_least_recently_kept_group_goes_first_past_the_bound(pro, other_user, semantic, settings):
    settings.SEMANTIC_CACHE_MAX_GROUPS = 1
    put_on_plan(other_user, "pro")
    _filed(pro)
    _filed(other_user)
    assert _asked(pro, PARAPHRASE).job.cached is None
    assert _asked(other_user, PARAPHRASE).job.cached == ANSWER


def test_no_person_is_served_anothers_answer_in_the_person_scope(pro, other_user, semantic):
    put_on_plan(other_user, "pro")
    _filed(pro)
    assert _asked(other_user, FIRST).job.cached is None


def test_the_public_scope_shares_only_questions_asked_under_the_products_prompt_alone(
    pro, other_user, semantic, settings
):
    settings.CHAT_DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
    put_on_plan(other_user, "pro")
    _set(semantic, scope=SemanticCachePolicy.Scope.PUBLIC)
    _filed(pro)

    assert _asked(other_user, PARAPHRASE).job.cache_hit == "similar"

    other_user.custom_instructions = "Answer in French."
    other_user.save()
    personal = _asked(other_user, PARAPHRASE)
    assert personal.job.cached is None and personal.job.similar_slot is None  # their own instructions: never


def test_the_public_scope_takes_no_program_and_no_question_with_an_address(pro, other_user, semantic, settings):
    settings.CHAT_DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
    put_on_plan(other_user, "pro")
    _set(semantic, scope=SemanticCachePolicy.Scope.PUBLIC)
    with_address = "What is the capital of France? Mail it to ada@example.com"
    _filed(pro, with_address)
    assert _asked(other_user, with_address).job.cached is None  # filed in the person's own scope only

    key, _ = create_api_key(pro, "a program")
    # The product's prompt is no secret: a program that sends it must still not reach the public scope.
    messages = [{"role": "system", "content": settings.CHAT_DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": FIRST}]
    body = {"model": "sim-small", "temperature": 0, "messages": messages}
    program = start(key, parse(body), "127.0.0.1", None, "")
    release_holds(program.reservation, program.job.rid)
    async_to_sync(semantic_cache.keep)(program.job.similar_slot, ANSWER)
    theirs, _ = create_api_key(other_user, "another program")
    probe = start(theirs, parse(body), "127.0.0.1", None, "")
    release_holds(probe.reservation, probe.job.rid)
    assert probe.job.cached is None  # a program cannot read what other tenants asked


def test_only_first_questions_without_files_or_pictures_are_looked_up(pro, semantic):
    first = _filed(pro)
    follow_up = _asked(pro, PARAPHRASE, conversation_id=first.conversation.pk)
    assert follow_up.job.cached is None and follow_up.job.similar_slot is None


def test_answer_afresh_asks_the_engine_and_the_cache_can_be_turned_off(pro, semantic):
    _filed(pro)
    hit = _asked(pro, PARAPHRASE)
    Message.objects.filter(pk=hit.assistant_message.pk).update(status=Message.Status.COMPLETED, content="Paris.")

    afresh = start_regeneration(pro, hit.assistant_message.pk)
    release_holds(afresh.reservation, afresh.job.rid)
    assert afresh.job.cached is None

    _set(semantic, enabled=False)
    off = _asked(pro, PARAPHRASE)
    assert off.job.cached is None and off.job.similar_slot is None


def test_without_an_embedding_model_the_question_is_answered_afresh(pro, semantic, settings):
    settings.RETRIEVAL_EMBEDDING_MODEL = ""
    turn = _asked(pro, FIRST)
    assert turn.job.cached is None and turn.job.similar_slot is None


def test_a_plan_that_opts_out_of_the_response_cache_opts_out_of_this_one(pro, semantic):
    _filed(pro)
    plan = current_period(pro).plan
    plan.response_cache = False
    plan.save()
    assert _asked(pro, PARAPHRASE).job.cached is None


def test_a_program_is_answered_from_it_only_when_it_asked_for_a_fixed_answer(pro, semantic):
    key, _ = create_api_key(pro, "a program")

    def asked(question: str, cache_control: str = "", **fields):
        body = {"model": "sim-small", "messages": [{"role": "user", "content": question}], **fields}
        generation = start(key, parse(body), "127.0.0.1", None, cache_control)
        release_holds(generation.reservation, generation.job.rid)
        return generation.job

    first = asked(FIRST, temperature=0)
    async_to_sync(semantic_cache.keep)(first.similar_slot, ANSWER)

    assert asked(PARAPHRASE, temperature=0).cache_hit == "similar"
    sampled = asked(PARAPHRASE)  # a sample was asked for: it gets one
    assert sampled.cached is None and sampled.similar_slot is None
    assert asked(PARAPHRASE, "no-cache", temperature=0).cached is None
    private = asked(PARAPHRASE, "no-store", temperature=0)
    assert private.cached is None and private.similar_slot is None
    assert asked(PARAPHRASE, temperature=0, max_tokens=7).cached is None  # another budget: another group

    raw = start(
        key, parse_text_completion({"model": "sim-small", "prompt": FIRST, "temperature": 0}), "127.0.0.1", None, ""
    )
    release_holds(raw.reservation, raw.job.rid)
    assert raw.job.similar_slot is None  # a text completion continues its prompt: it is not a question


def test_the_console_counts_hits_and_the_thumbs_down_on_them(pro, semantic):
    _filed(pro)
    hit = _asked(pro, PARAPHRASE)
    Message.objects.filter(pk=hit.assistant_message.pk).update(
        status=Message.Status.COMPLETED, content="Paris.", cache_hit="similar"
    )
    AnswerFeedback.objects.create(message=hit.assistant_message, user=pro, rating=AnswerFeedback.Rating.DOWN)

    report = semantic_cache_report()

    assert (report["answers"], report["similar"], report["wrong_hit_reports"]) == (2, 1, 1)
    assert report["hit_rate"] == 0.5


def test_a_rollout_never_serves_the_other_versions_answer(pro, semantic):
    key, _ = create_api_key(pro, "a program")

    def asked(question: str):
        body = {"model": "sim-small", "temperature": 0, "messages": [{"role": "user", "content": question}]}
        generation = start(key, parse(body), "127.0.0.1", None, "")
        release_holds(generation.reservation, generation.job.rid)
        return generation.job

    ModelRoute.objects.create(model="sim-small", group="default", weight=100)
    rollout.invalidate()
    async_to_sync(semantic_cache.keep)(asked(FIRST).similar_slot, ANSWER)
    assert asked(PARAPHRASE).cache_hit == "similar"

    # Weights changed without a signal (no clear): what keeps the versions apart is the group alone.
    ModelRoute.objects.bulk_create([ModelRoute(model="sim-small", group="green", weight=10)])
    rollout.invalidate()
    during = asked(PARAPHRASE)
    assert during.cached is None and during.similar_slot is None  # two versions serve it: never looked up

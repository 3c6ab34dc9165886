"""Auto (chat/generation/auto_route.py), in-process: offered where configured, it picks per turn among
the models the plan allows, never another; rules first (pictures, tools, a long prompt), then the
difficulty estimate against the staff's target share; the answer records why; "Retry with the larger
model" is an escalation. The estimate's own quality is measured by the bench (its workload phase)."""

import pytest

from accounts.api_keys import create_api_key
from api.completions import start
from api.requests import parse
from chat.generation import auto_route, difficulty
from chat.generation.admit import release_holds
from chat.generation.completion import start_internal
from chat.generation.start import start_regeneration, start_turn
from chat.generation.turn import TITLE
from chat.models import AnswerFeedback, AutoModelPolicy, Message
from chat.selectors import auto_model_report, model_menu
from chat.serializers import message_json
from config.refusals import NotAllowed
from inference import fleet
from inference.catalogue import AUTO, available_models
from inference.models import InferenceNode
from tests.support.images import data_url, png
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

EASY = "What is the capital of Canada?"
HARD = (
    "Design a rate limiter for a distributed API gateway; explain the data structures, the trade-offs "
    "and how you would test it step by step."
)


@pytest.fixture
def auto(settings):
    settings.INFERENCE_AUTO_MODEL = ["sim-small", "sim-large"]


@pytest.fixture
def pro(user):
    put_on_plan(user, "pro")
    return user


def _nodes_saying(capability: str, *, small: bool, large: bool) -> None:
    """A node for each model, whose engine said whether it has `capability` (inference.capabilities)."""
    for name, model, has in (("gpu-s", "sim-small", small), ("gpu-l", "sim-large", large)):
        InferenceNode.objects.create(
            name=name,
            base_url=f"http://{name}.invalid:30000",
            model_ids=[model],
            health="up",
            capabilities={capability: has},
        )
    fleet.invalidate()


def _asked(user, question: str, **kwargs):
    turn = start_turn(user, content=question, model=AUTO, **kwargs)
    release_holds(turn.reservation, turn.job.rid)
    return turn


def test_auto_is_offered_first_only_where_configured(settings, pro):
    assert AUTO not in [m.id for m in available_models()]
    settings.INFERENCE_AUTO_MODEL = ["sim-small", "sim-large"]
    assert available_models()[0].id == AUTO
    auto_item = model_menu(put_on_plan(pro, "pro"))[0]
    assert auto_item["allowed"] and auto_item["larger"] == {
        "id": "sim-large",
        "name": "Simulated Large",
        "allowed": True,
    }


def test_an_easy_turn_goes_to_the_small_model_and_a_hard_one_to_the_large(pro, auto):
    easy, hard = _asked(pro, EASY), _asked(pro, HARD)

    assert (easy.job.model, easy.assistant_message.auto_route) == ("sim-small", "easy")
    assert (hard.job.model, hard.assistant_message.auto_route) == ("sim-large", "hard")
    assert easy.conversation.model == AUTO  # the next turn chooses again
    assert message_json(easy.assistant_message)["auto_route"] == "easy"


def test_auto_never_picks_a_model_the_plan_does_not_allow(user, auto):
    put_on_plan(user, "plus", all_models=False, model_ids=["sim-small"])  # the small model only

    hard = _asked(user, HARD)

    assert (hard.job.model, hard.assistant_message.auto_route) == ("sim-small", "plan")
    Message.objects.filter(pk=hard.assistant_message.pk).update(status=Message.Status.COMPLETED, content="…")
    with pytest.raises(NotAllowed):
        start_regeneration(user, hard.assistant_message.pk, model="sim-large")


def test_a_prompt_the_small_window_cannot_hold_goes_to_the_large_model(pro, auto, settings):
    settings.INFERENCE_MODEL_CONTEXT_TOKENS = {"sim-small": 1024, "sim-large": 8192}
    long_question = "What is this? " + "word " * 1200

    turn = _asked(pro, long_question)

    assert (turn.job.model, turn.assistant_message.auto_route) == ("sim-large", "context")


def test_tools_go_to_the_model_whose_engines_call_them(pro, auto):
    _nodes_saying("tools", small=False, large=True)
    key, _ = create_api_key(pro, "a program")
    tool = {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
    body = {"model": AUTO, "messages": [{"role": "user", "content": EASY}], "tools": [tool]}

    generation = start(key, parse(body), "127.0.0.1", None, "")
    release_holds(generation.reservation, generation.job.rid)

    assert generation.job.model == "sim-large" and generation.turn.auto_route == "tools"


def test_the_target_share_moves_the_threshold(pro, auto):
    AutoModelPolicy.objects.create(large_share_percent=0)
    auto_route.forget_policy()
    assert _asked(pro, HARD).job.model == "sim-small"

    AutoModelPolicy.objects.update(large_share_percent=100)
    auto_route.forget_policy()
    assert _asked(pro, EASY).job.model == "sim-large"

    # With enough turns seen, the threshold is the score the target share of them reached.
    AutoModelPolicy.objects.update(large_share_percent=25)
    auto_route.forget_policy()
    for n in range(100):
        auto_route._remember(n / 100)
    assert auto_route.threshold() == pytest.approx(0.75)


def test_retry_with_the_larger_model_is_an_escalation(pro, auto):
    easy = _asked(pro, EASY)
    Message.objects.filter(pk=easy.assistant_message.pk).update(status=Message.Status.COMPLETED, content="Ottawa.")

    retried = start_regeneration(pro, easy.assistant_message.pk, model="sim-large")
    release_holds(retried.reservation, retried.job.rid)

    assert (retried.job.model, retried.assistant_message.auto_route) == ("sim-large", "escalated")
    again = start_regeneration(pro, easy.assistant_message.pk)  # no model named: Auto chooses again
    release_holds(again.reservation, again.job.rid)
    assert again.assistant_message.auto_route == "easy"


def test_the_console_shows_the_share_per_model_escalations_and_thumbs(pro, auto):
    easy = _asked(pro, EASY)
    _asked(pro, HARD)
    Message.objects.filter(pk=easy.assistant_message.pk).update(status=Message.Status.COMPLETED, content="Ottawa.")
    retried = start_regeneration(pro, easy.assistant_message.pk, model="sim-large")
    release_holds(retried.reservation, retried.job.rid)
    AnswerFeedback.objects.create(message=easy.assistant_message, user=pro, rating=AnswerFeedback.Rating.DOWN)

    report = auto_model_report()

    by_model = {row["model"]: row for row in report["models"]}
    assert report["answers"] == 2 and report["escalated"] == 1
    assert by_model["sim-small"]["share"] == 0.5 and by_model["sim-small"]["regenerated"] == 1
    assert by_model["sim-small"]["down"] == 1 and by_model["sim-large"]["down"] == 0
    assert report["routes"] == {"easy": 1, "hard": 1}


def test_the_difficulty_estimate_ranks_the_labelled_examples():
    examples = difficulty.labelled()
    right = sum((difficulty.score(text) >= 0.5) == hard for text, hard in examples)
    assert right / len(examples) > 0.9  # on the examples it was fitted on; the bench cross-validates


def test_pictures_go_to_the_model_whose_engines_read_them_even_the_small_one(pro, auto):
    _nodes_saying("images", small=True, large=False)
    key, _ = create_api_key(pro, "a program")
    picture = {"type": "image_url", "image_url": {"url": data_url(png(64, 64))}}
    content = [{"type": "text", "text": HARD}, picture]  # hard-looking, but only the small model sees it

    generation = start(
        key, parse({"model": AUTO, "messages": [{"role": "user", "content": content}]}), "127.0.0.1", None, ""
    )
    release_holds(generation.reservation, generation.job.rid)

    assert generation.job.model == "sim-small" and generation.turn.auto_route == "images"


def test_a_program_that_names_no_max_tokens_gets_the_answer_room_of_the_model_auto_chose(pro, auto, settings):
    settings.INFERENCE_MODEL_CONTEXT_TOKENS = {"sim-small": 8192, "sim-large": 32768}
    key, _ = create_api_key(pro, "a program")

    easy = start(key, parse({"model": AUTO, "messages": [{"role": "user", "content": EASY}]}), "127.0.0.1", None, "")
    release_holds(easy.reservation, easy.job.rid)

    # Pro keeps up to 8,192 tokens for an answer, at most half the window: 4,096 on the small model.
    assert (easy.job.model, easy.turn.auto_route, easy.job.max_tokens) == ("sim-small", "easy", 4096)


def test_a_response_format_goes_to_the_model_whose_engines_constrain_output(pro, auto):
    _nodes_saying("json_schema", small=False, large=True)
    key, _ = create_api_key(pro, "a program")
    body = {
        "model": AUTO,
        "messages": [{"role": "user", "content": EASY}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": {"type": "object"}}},
    }

    generation = start(key, parse(body), "127.0.0.1", None, "")
    release_holds(generation.reservation, generation.job.rid)

    assert (generation.job.model, generation.turn.auto_route) == ("sim-large", "format")


def test_titles_and_summaries_of_an_auto_chat_run_on_the_smaller_model_the_plan_allows(pro, auto):
    generation = start_internal(pro, AUTO, "Title this: " + EASY, max_tokens=24, purpose=TITLE)
    release_holds(generation.reservation, generation.job.rid)
    assert generation.job.model == "sim-small"


def test_only_a_retry_of_the_small_models_answer_on_the_large_one_is_an_escalation(pro, auto):
    hard = _asked(pro, HARD)
    Message.objects.filter(pk=hard.assistant_message.pk).update(status=Message.Status.COMPLETED, content="A plan.")

    again = start_regeneration(pro, hard.assistant_message.pk, model="sim-large")  # already the large model's
    release_holds(again.reservation, again.job.rid)

    assert again.assistant_message.auto_route == ""


def test_only_admitted_first_asks_move_the_threshold(pro, auto):
    easy = _asked(pro, EASY)
    assert len(auto_route._recent()) == 1
    Message.objects.filter(pk=easy.assistant_message.pk).update(status=Message.Status.COMPLETED, content="Ottawa.")
    again = start_regeneration(pro, easy.assistant_message.pk)
    release_holds(again.reservation, again.job.rid)
    assert len(auto_route._recent()) == 1  # a regeneration is not scored again


def test_v1_models_lists_auto_first_with_what_the_plans_models_hold(client, user, auto, settings):
    settings.INFERENCE_MODEL_CONTEXT_TOKENS = {"sim-small": 2048, "sim-large": 8192}
    put_on_plan(user, "plus", all_models=False, model_ids=["sim-small"])  # the small model only
    _, raw = create_api_key(user, "a program")

    listed = client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}").json()["data"]

    assert [m["id"] for m in listed][:2] == ["auto", "sim-small"]
    assert listed[0]["context_window"] == 2048  # the small model's: the one Auto can choose on this plan

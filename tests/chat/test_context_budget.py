"""One rule decides what fits a plan's context window with room for an answer (issue: a 29,999-character
message on Free was accepted, answered and billed). The web chat and the API both ask it."""

import pytest
from django.conf import settings

from chat.generation.assemble import assemble_for_turn, check_fits
from chat.generation.turn import resolve_turn
from config.refusals import TooLarge
from config.tokens import estimate_message_tokens
from tests.chat.factories import conversation_for, exchange
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

SYSTEM = "Be brief."


def test_a_message_longer_than_the_free_window_is_refused_with_both_numbers(user):
    put_on_plan(user, "free")
    turn = resolve_turn(user, "sim-small")
    message = "x" * 29_999  # about 7,500 tokens: under the character limit, over Free's 4,096-token window

    with pytest.raises(TooLarge) as refused:
        assemble_for_turn(turn, system_prompt=SYSTEM, summary="", history=[], question=message)

    assert refused.value.status == 413
    text = refused.value.message
    # The product's prompt and the conversation's own both count (each is a system message of its own).
    total = sum(map(estimate_message_tokens, (settings.CHAT_DEFAULT_SYSTEM_PROMPT, SYSTEM, message)))
    assert f"{total:,} tokens" in text
    assert "4,096 tokens" in text and "1,024" in text  # the window and the room kept for the answer
    assert "Plus" in text  # the plan with a bigger window


def test_the_free_refusal_offers_the_window_the_model_holds_on_the_plan_it_names(user, settings):
    # Plus allows 16,384 tokens, but Simulated Small holds 8,192: the upsell must not promise more.
    settings.INFERENCE_CONTEXT_TOKENS = 8192
    put_on_plan(user, "free")
    turn = resolve_turn(user, "sim-small")

    with pytest.raises(TooLarge) as refused:
        check_fits(turn, 5000)

    text = refused.value.message
    assert "upgrade to Plus, whose window on Simulated Small is 8,192 tokens." in text
    assert "16,384" not in text and "32,768" not in text


def test_no_plan_is_offered_when_none_holds_more_on_this_model(user, settings):
    # Every plan gets the model's 8,192 at most: Plus's refusal on it offers no upgrade (Pro would not help).
    settings.INFERENCE_CONTEXT_TOKENS = 8192
    put_on_plan(user, "plus")
    with pytest.raises(TooLarge) as refused:
        check_fits(resolve_turn(user, "sim-large"), 7000)
    assert "8,192 tokens" in refused.value.message and "upgrade" not in refused.value.message


def test_the_answer_keeps_the_plans_longest_answer_but_never_more_than_half_the_window(user):
    put_on_plan(user, "free")
    free = resolve_turn(user, "sim-small")
    assert (free.context_window, free.max_output_tokens, free.prompt_budget) == (4096, 1024, 3072)

    put_on_plan(user, "pro")  # 32,768 on the plan, but the model holds 8,192, and Pro's answers may be 8,192
    pro = resolve_turn(user, "sim-small")
    assert (pro.context_window, pro.max_output_tokens, pro.prompt_budget) == (8192, 4096, 4096)


def test_exactly_the_budget_fits_and_one_token_more_does_not(user):
    put_on_plan(user, "free")
    turn = resolve_turn(user, "sim-small")
    check_fits(turn, turn.prompt_budget)
    with pytest.raises(TooLarge):
        check_fits(turn, turn.prompt_budget + 1)


def test_an_api_caller_asking_for_a_long_answer_leaves_less_room_for_the_prompt(user):
    put_on_plan(user, "pro")
    turn = resolve_turn(user, "sim-small", max_output_tokens=8000, api_key_id=1)
    assert turn.prompt_budget == 192
    with pytest.raises(TooLarge) as refused:
        check_fits(turn, 500, what="The messages")
    assert "max_tokens" in refused.value.message and "8,192" in refused.value.message


def _long_history(user) -> list:
    """Twelve exchanges of about 500 tokens each: more than a free plan's prompt can carry."""
    conversation = conversation_for(user)
    history, parent = [], None
    for n in range(12):
        q, a = exchange(conversation, f"question {n} " + "q" * 1000, f"answer {n} " + "a" * 1000, parent=parent)
        history += [q, a]
        parent = a
    return history


def test_older_turns_are_left_out_but_the_new_message_always_goes_in(user):
    put_on_plan(user, "free")
    turn = resolve_turn(user, "sim-small")
    history = _long_history(user)
    question = "y" * 8000  # 2,004 tokens: fits on its own, leaves little room for history

    prompt = assemble_for_turn(turn, system_prompt=SYSTEM, summary="", history=history, question=question)

    assert prompt.messages[-1] == {"role": "user", "content": question}
    assert prompt.estimated_tokens <= turn.prompt_budget
    assert prompt.dropped and len(prompt.messages) < len(history) + 2


def test_the_answer_keeps_which_turns_its_prompt_carried_and_the_summary_that_stood_in(user):
    """What the feedback export gives evaluations (Message.prompt_frame): the turns sent, not those left out."""
    put_on_plan(user, "free")
    turn = resolve_turn(user, "sim-small")
    history = _long_history(user)

    prompt = assemble_for_turn(
        turn, system_prompt=SYSTEM, summary="Earlier: cats.", history=history, question="y" * 8000
    )

    carried = [m.pk for m in history if m not in prompt.dropped]
    assert prompt.frame["turns"] == carried and carried and prompt.dropped
    assert prompt.frame["summary"] == "Earlier: cats." and prompt.frame["system"][-1] == SYSTEM
    whole = assemble_for_turn(turn, system_prompt=SYSTEM, summary="Earlier: cats.", history=history[-2:], question="y")
    assert whole.frame["summary"] == "" and whole.frame["turns"] == [m.pk for m in history[-2:]]


def test_an_answer_is_continued_at_the_end_of_its_prompt_unless_it_leaves_no_room_to_write_on(user):
    put_on_plan(user, "free")
    turn = resolve_turn(user, "sim-small")
    question, so_far = "Tell me a long story.", "Once upon a time, a keeper lived in a lighthouse."

    prompt = assemble_for_turn(turn, system_prompt="", summary="", history=[], question=question, answer_so_far=so_far)
    assert prompt.messages[-2:] == [{"role": "user", "content": question}, {"role": "assistant", "content": so_far}]
    plain = assemble_for_turn(turn, system_prompt="", summary="", history=[], question=question)
    assert prompt.estimated_tokens == plain.estimated_tokens + estimate_message_tokens(so_far)

    too_long = "word " * (turn.prompt_budget * 2)  # the question fits; with the answer so far, nothing does
    with pytest.raises(TooLarge) as refused:
        assemble_for_turn(turn, system_prompt="", summary="", history=[], question=question, answer_so_far=too_long)
    assert refused.value.status == 413
    assert refused.value.message.startswith("This answer cannot be continued:")
    assert f"{turn.prompt_budget:,} tokens" in refused.value.message

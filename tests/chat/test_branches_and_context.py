import pytest

from chat.generation.assemble import SUMMARY_HEADER, assemble
from chat.selectors import branch, conversations_for, get_conversation, get_message
from config.refusals import NotFound
from tests.chat.factories import conversation_for, exchange, say

pytestmark = pytest.mark.django_db


def test_the_branch_shown_ends_at_the_newest_message_and_lists_siblings(user):
    conv = conversation_for(user)
    _q1, a1 = exchange(conv, "first question", "first answer")
    q2, a2 = exchange(conv, "second question", "second answer", parent=a1)
    regenerated = say(conv, "assistant", "second answer, take two", parent=q2)

    shown = branch(conv)

    assert [m.content for m in shown] == [
        "first question",
        "first answer",
        "second question",
        "second answer, take two",
    ]
    assert shown[-1].sibling_ids == [a2.pk, regenerated.pk]


def test_choosing_an_older_leaf_shows_that_branch_and_its_descendants(user):
    conv = conversation_for(user)
    q1, _a1 = exchange(conv, "q", "a")
    edited = say(conv, "user", "q, edited")
    say(conv, "assistant", "a to edited", parent=edited)

    shown = branch(conv, leaf_id=q1.pk)

    assert [m.content for m in shown] == ["q", "a"]
    assert shown[0].sibling_ids == [q1.pk, edited.pk]


def test_another_users_conversation_and_messages_are_not_found(user, other_user):
    conv = conversation_for(other_user)
    question, _ = exchange(conv, "private", "answer")
    with pytest.raises(NotFound):
        get_conversation(user, conv.pk)
    with pytest.raises(NotFound):
        get_message(user, question.pk)


def test_search_finds_conversations_by_title_and_by_message_text(user, other_user):
    titled = conversation_for(user, title="Trip to Lisbon")
    by_text = conversation_for(user, title="Misc")
    exchange(by_text, "How do I cook lisbon-style cod?", "Like this")
    conversation_for(user, title="Unrelated")
    exchange(conversation_for(other_user, title="Lisbon too"), "lisbon", "x")

    found = {c.pk for c in conversations_for(user, query="lisbon")}

    assert found == {titled.pk, by_text.pk}


def test_context_keeps_the_system_prompt_first_and_the_newest_turns_that_fit(user):
    conv = conversation_for(user, system_prompt="SYSTEM", summary="They talked about cats.")
    history = []
    parent = None
    for i in range(10):
        q, a = exchange(conv, f"question {i} " + "x" * 200, f"answer {i} " + "y" * 200, parent=parent)
        history += [q, a]
        parent = a

    prompt = assemble(conv.system_prompt, conv.summary, history, "and now?", budget=400)

    assert prompt.messages[0] == {"role": "system", "content": "SYSTEM"}
    assert prompt.messages[1]["content"] == SUMMARY_HEADER + "They talked about cats."
    assert prompt.messages[-1] == {"role": "user", "content": "and now?"}
    assert prompt.messages[-2]["content"].startswith("answer 9")
    assert prompt.dropped and prompt.dropped[0].content.startswith("question 0")
    assert prompt.estimated_tokens <= 400
    kept = [m["content"] for m in prompt.messages[2:-1]]
    assert kept == [m.content for m in history[len(prompt.dropped) :]]


def test_context_that_fits_has_no_summary_and_drops_nothing(user):
    conv = conversation_for(user, system_prompt="SYSTEM", summary="old summary")
    q, a = exchange(conv, "hi", "hello")

    prompt = assemble(conv.system_prompt, conv.summary, [q, a], "and then?", budget=4000)

    assert [m["role"] for m in prompt.messages] == ["system", "user", "assistant", "user"]
    assert prompt.dropped == []


def test_unfinished_or_empty_answers_are_left_out_of_the_context(user):
    conv = conversation_for(user)
    q = say(conv, "user", "question")
    failed_empty = say(conv, "assistant", "", parent=q, status="failed")

    prompt = assemble(conv.system_prompt, conv.summary, [q, failed_empty], "question, again", budget=4000)

    assert [m["content"] for m in prompt.messages[1:]] == ["question", "question, again"]

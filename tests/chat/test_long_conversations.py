"""A long conversation loads a page at a time: the newest messages first, earlier ones on request."""

import pytest

from tests.chat.factories import conversation_for, exchange

pytestmark = pytest.mark.django_db


def _long(user, turns: int):
    conversation = conversation_for(user)
    messages, parent = [], None
    for n in range(turns):
        question, parent = exchange(conversation, f"question {n}", f"answer {n}", parent=parent)
        messages += [question, parent]
    return conversation, messages


def test_the_newest_page_comes_first_and_earlier_pages_on_request(user_client, user):
    conversation, messages = _long(user, 125)  # 250 messages
    url = f"/chat/api/conversations/{conversation.pk}"

    newest = user_client.get(url).json()
    assert [m["id"] for m in newest["messages"]] == [m.pk for m in messages[150:]]
    assert newest["has_earlier"] is True

    before = user_client.get(url, {"before": messages[150].pk}).json()
    assert [m["id"] for m in before["messages"]] == [m.pk for m in messages[50:150]]
    assert before["has_earlier"] is True

    first = user_client.get(url, {"before": messages[50].pk}).json()
    assert [m["id"] for m in first["messages"]] == [m.pk for m in messages[:50]]
    assert first["has_earlier"] is False
    assert first["messages"][0]["content"] == "question 0"


def test_a_short_conversation_comes_whole_and_pages_follow_the_chosen_branch(user_client, user):
    conversation, messages = _long(user, 3)
    edited, _ = exchange(conversation, "question 1, edited", "another answer", parent=messages[1])
    url = f"/chat/api/conversations/{conversation.pk}"

    whole = user_client.get(url).json()
    assert whole["has_earlier"] is False
    assert [m["content"] for m in whole["messages"]][-2:] == ["question 1, edited", "another answer"]

    older_branch = user_client.get(url, {"leaf": messages[-1].pk, "before": messages[4].pk, "limit": 2}).json()
    assert [m["content"] for m in older_branch["messages"]] == ["question 1", "answer 1"]
    assert older_branch["has_earlier"] is True
    assert older_branch["messages"][0]["siblings"] == [messages[2].pk, edited.pk]


@pytest.mark.parametrize(
    "query, status",
    [
        ({"before": "x"}, 400),
        ({"limit": "0"}, 400),
        ({"limit": "501"}, 400),
        ({"before": "999999"}, 404),
    ],
)
def test_bad_paging_is_refused_with_a_sentence(user_client, user, query, status):
    conversation, _ = _long(user, 2)
    response = user_client.get(f"/chat/api/conversations/{conversation.pk}", query)
    assert response.status_code == status
    assert response.json()["error"]["message"]

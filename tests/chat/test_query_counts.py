"""The database work of one message does not grow with the conversation (issue: the path of one message)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chat.generation.admission import release_now
from chat.generation.start import start_turn
from tests.chat.factories import conversation_for, exchange
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db


def _conversation(user, turns: int):
    conversation = conversation_for(user)
    parent = None
    for n in range(turns):
        _, parent = exchange(conversation, f"question {n}", f"answer {n}", parent=parent)
    return conversation


def _queries_to_send(user, conversation) -> int:
    with CaptureQueriesContext(connection) as queries:
        turn = start_turn(user, content="one more question", conversation_id=conversation.pk)
    release_now(turn.job.rid)
    return len(queries)


def test_sending_costs_the_same_queries_in_a_short_and_a_long_conversation(user):
    put_on_plan(user, "pro", requests_per_minute=1000)
    short, long = _conversation(user, 1), _conversation(user, 200)
    _queries_to_send(user, _conversation(user, 1))  # the first of a period also rebuilds the quota counter
    assert _queries_to_send(user, short) == _queries_to_send(user, long)


def test_loading_a_conversation_costs_the_same_queries_whatever_its_length(client, user):
    put_on_plan(user, "pro")
    client.force_login(user)
    counts = []
    for conversation in (_conversation(user, 1), _conversation(user, 200)):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(f"/chat/api/conversations/{conversation.pk}")
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_the_sidebar_costs_the_same_queries_for_few_and_many_conversations(client, user):
    client.force_login(user)
    counts = []
    for total in (2, 60):
        while user.conversations.count() < total:
            _conversation(user, 1)
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/chat/api/conversations")
        assert response.status_code == 200 and len(response.json()["conversations"]) == total
        counts.append(len(queries))
    assert counts[0] == counts[1]

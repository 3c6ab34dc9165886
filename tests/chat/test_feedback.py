"""Thumbs up/down on answers, for evaluations: who may rate what, what the chat page gets back, and
the JSONL export staff take from the admin or the command line."""

import io
import json

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounts import services as accounts_services
from billing import services as billing
from chat.feedback import selectors, services
from chat.feedback.services import COMMENT_MAX, NotRatable
from chat.generation import admission
from chat.generation.start import start_turn
from chat.models import AnswerFeedback, Message
from config.refusals import BadInput, NotAllowed, NotFound
from tests.chat.factories import conversation_for, exchange, say
from tests.support.accounts import make_staff, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation(user):
    return conversation_for(user, title="Lisbon", system_prompt="Be brief.")


@pytest.fixture
def answer(conversation):
    _, answer = exchange(conversation, "Where should I eat?", "Try the bifanas.")
    Message.objects.filter(pk=answer.pk).update(model="sim-small", node="http://node-a:30000")
    answer.refresh_from_db()
    return answer


def url(message_id: int) -> str:
    return reverse("chat:message-feedback", args=[message_id])


def put(client, message_id, body):
    return client.put(url(message_id), data=json.dumps(body), content_type="application/json")


# --- the service ------------------------------------------------------------------------------------------------


def test_a_rating_is_saved_changed_and_withdrawn(user, answer):
    feedback, created = services.rate_answer(user, answer.pk, "down", "Too vague.")
    assert created and feedback.rating == "down" and feedback.comment == "Too vague."

    # Changing the rating alone keeps the comment; there is still one rating.
    feedback, created = services.rate_answer(user, answer.pk, "up")
    assert not created and feedback.rating == "up" and feedback.comment == "Too vague."
    assert AnswerFeedback.objects.filter(message=answer).count() == 1

    feedback, _ = services.rate_answer(user, answer.pk, "up", "  ")
    assert feedback.comment == ""

    assert services.withdraw_rating(user, answer.pk) is True
    assert not AnswerFeedback.objects.exists()
    assert services.withdraw_rating(user, answer.pk) is False


def test_the_database_keeps_one_rating_per_user_and_answer(user, answer):
    AnswerFeedback.objects.create(message=answer, user=user, rating="up")
    with pytest.raises(IntegrityError), transaction.atomic():
        AnswerFeedback.objects.create(message=answer, user=user, rating="down")


@pytest.mark.parametrize("status", ["pending", "streaming"])
def test_an_answer_still_being_written_cannot_be_rated(user, answer, status):
    Message.objects.filter(pk=answer.pk).update(status=status)
    with pytest.raises(NotRatable, match="still being written") as refused:
        services.rate_answer(user, answer.pk, "up")
    assert refused.value.status == 409


@pytest.mark.parametrize(
    "status, words", [("failed", "failed"), ("interrupted", "was interrupted"), ("blocked", "was blocked")]
)
def test_an_answer_that_ended_without_its_text_cannot_be_rated(user, answer, status, words):
    Message.objects.filter(pk=answer.pk).update(status=status)
    with pytest.raises(NotRatable, match=words):
        services.rate_answer(user, answer.pk, "down")


def test_a_stopped_answer_can_be_rated(user, answer):
    Message.objects.filter(pk=answer.pk).update(status="stopped")
    assert services.rate_answer(user, answer.pk, "down", "Stopped: it rambled.")[0].rating == "down"


def test_only_answers_are_rated_and_only_the_owners(user, other_user, answer):
    with pytest.raises(BadInput, match="Only answers"):
        services.rate_answer(user, answer.parent_id, "up")
    with pytest.raises(NotFound):
        services.rate_answer(other_user, answer.pk, "up")
    with pytest.raises(NotFound):
        services.withdraw_rating(other_user, answer.pk)


@pytest.mark.parametrize("rating", [None, "", "UP", "meh", 1, True])
def test_the_rating_is_up_or_down(user, answer, rating):
    with pytest.raises(BadInput, match='"up" or "down"'):
        services.rate_answer(user, answer.pk, rating)


def test_a_comment_is_text_of_limited_length(user, answer):
    with pytest.raises(BadInput, match=f"the limit is {COMMENT_MAX}"):
        services.rate_answer(user, answer.pk, "down", "x" * (COMMENT_MAX + 1))
    with pytest.raises(BadInput, match="comment must be text"):
        services.rate_answer(user, answer.pk, "down", ["list"])
    assert services.rate_answer(user, answer.pk, "down", "x" * COMMENT_MAX)[0].comment == "x" * COMMENT_MAX


def test_a_suspended_user_cannot_rate(user, answer):
    accounts_services.suspend_user(user, "Spam")
    with pytest.raises(NotAllowed, match="suspended"):
        services.rate_answer(user, answer.pk, "up")


def test_attach_feedback_gives_each_answer_its_rating_in_one_query(
    user, other_user, conversation, answer, django_assert_num_queries
):
    _, second = exchange(conversation, "And dessert?", "Pastéis de nata.", parent=answer)
    pending = say(conversation, "assistant", "", parent=second.parent, status="pending")
    services.rate_answer(user, answer.pk, "down", "Vague")
    messages = list(Message.objects.filter(conversation=conversation))
    with django_assert_num_queries(1):
        selectors.attach_feedback(user.pk, messages)
    ratings = {m.pk: (m.user_feedback.rating if m.user_feedback else None) for m in messages}
    assert ratings[answer.pk] == "down" and ratings[second.pk] is None and ratings[pending.pk] is None
    # Nothing to rate on the page: no query at all.
    with django_assert_num_queries(0):
        selectors.attach_feedback(user.pk, [m for m in messages if m.role == "user"])


# --- the endpoint ---------------------------------------------------------------------------------------------------


def test_rating_through_the_endpoint_and_seeing_it_in_the_conversation(user_client, conversation, answer):
    response = put(user_client, answer.pk, {"rating": "down", "comment": "It ignored my budget."})
    assert response.status_code == 201
    assert response.json()["feedback"]["rating"] == "down"
    assert response.json()["feedback"]["comment"] == "It ignored my budget."

    loaded = user_client.get(f"/chat/api/conversations/{conversation.pk}").json()["messages"]
    by_id = {m["id"]: m for m in loaded}
    assert by_id[answer.pk]["feedback"]["rating"] == "down"
    assert by_id[answer.pk]["feedback"]["comment"] == "It ignored my budget."
    assert by_id[answer.parent_id]["feedback"] is None

    changed = put(user_client, answer.pk, {"rating": "up"})
    assert changed.status_code == 200
    assert changed.json()["feedback"] == {
        **changed.json()["feedback"],
        "rating": "up",
        "comment": "It ignored my budget.",
    }

    assert user_client.delete(url(answer.pk)).status_code == 204
    loaded = user_client.get(f"/chat/api/conversations/{conversation.pk}").json()["messages"]
    assert {m["id"]: m for m in loaded}[answer.pk]["feedback"] is None


def test_the_endpoint_refuses_another_users_answer_with_404(client, other_user, answer):
    client.force_login(other_user)
    response = put(client, answer.pk, {"rating": "up"})
    assert response.status_code == 404
    assert response.json()["error"] == {"code": "not_found", "message": "There is no such message.", "status": 404}
    assert client.delete(url(answer.pk)).status_code == 404
    assert not AnswerFeedback.objects.exists()


def test_the_endpoint_refuses_a_pending_answer_with_409(user_client, answer):
    Message.objects.filter(pk=answer.pk).update(status="pending")
    response = put(user_client, answer.pk, {"rating": "up"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "not_ratable"
    assert "still being written" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "body, words",
    [
        ({"rating": "sideways"}, '"up" or "down"'),
        ({}, '"up" or "down"'),
        ({"rating": "down", "comment": 42}, "comment must be text"),
    ],
)
def test_the_endpoint_refuses_bad_input_with_400(user_client, answer, body, words):
    response = put(user_client, answer.pk, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request" and words in response.json()["error"]["message"]


def test_the_endpoint_wants_a_signed_in_user_and_put_or_delete(user_client, answer):
    assert put(Client(), answer.pk, {"rating": "up"}).status_code == 401
    assert user_client.post(url(answer.pk), {"rating": "up"}).status_code == 405
    assert user_client.put(url(answer.pk), data="{not json", content_type="application/json").status_code == 400


# --- the export -----------------------------------------------------------------------------------------------------


@pytest.fixture
def branched(user, conversation):
    """Two branches: the user edited their second question; only the edited branch's answer is rated."""
    _, a1 = exchange(conversation, "Where should I eat?", "Try the bifanas.")
    exchange(conversation, "Something sweet?", "Ginjinha.", parent=a1)  # the branch left behind
    _, rated = exchange(conversation, "Something sweet, not a drink?", "Pastéis de nata.", parent=a1)
    Message.objects.filter(pk=rated.pk).update(model="sim-small", node="http://node-a:30000")
    services.rate_answer(user, rated.pk, "down", "Name a bakery.")
    return rated


def export_lines(*args) -> list[dict]:
    out = io.StringIO()
    call_command("export_feedback", *args, stdout=out, stderr=io.StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_command_writes_jsonl_with_the_branch_leading_to_the_answer(branched, conversation):
    [record] = export_lines()
    assert record["context"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Where should I eat?"},
        {"role": "assistant", "content": "Try the bifanas."},
        {"role": "user", "content": "Something sweet, not a drink?"},
    ]
    assert record["answer"] == "Pastéis de nata."
    assert (record["model"], record["node"], record["rating"], record["comment"]) == (
        "sim-small",
        "http://node-a:30000",
        "down",
        "Name a bakery.",
    )
    assert record["message_id"] == branched.pk and record["conversation_id"] == conversation.pk
    assert record["created"].endswith("Z")


def test_the_export_holds_the_prompt_the_answer_was_written_with_not_the_chat_as_it_is_now(
    user, conversation, engine, settings
):
    """Evaluation data is what the model saw: the product's prompt, the person's custom instructions and
    the chat's system prompt as they were then, and the turns the prompt carried (issue 24)."""
    settings.SGLANG_URL = engine.url
    settings.CHAT_DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
    user.custom_instructions = "Answer in Portuguese."
    user.save(update_fields=["custom_instructions"])
    _, first = exchange(conversation, "Where should I eat?", "Try the bifanas.")
    turn = start_turn(user, content="Something sweet?", conversation_id=conversation.pk, parent_id=first.pk)
    admission.release_now(turn.job.rid)
    billing.release(turn.reservation)
    Message.objects.filter(pk=turn.assistant_message.pk).update(status="completed", content="Pastéis de nata.")
    conversation.system_prompt = "Be verbose."  # changed since
    conversation.save(update_fields=["system_prompt"])
    services.rate_answer(user, turn.assistant_message.pk, "up")

    [record] = export_lines()

    assert record["context"] == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "system", "content": "Answer in Portuguese."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Where should I eat?"},
        {"role": "assistant", "content": "Try the bifanas."},
        {"role": "user", "content": "Something sweet?"},
    ]
    assert record["context_recorded"] is True
    assert record["answer"] == "Pastéis de nata."


def test_an_answer_saved_before_its_prompt_was_recorded_is_exported_as_reconstructed(branched):
    [record] = export_lines()
    assert record["context_recorded"] is False  # rebuilt from the chat as it is now


def test_the_command_writes_a_file_and_filters_by_date(branched, tmp_path):
    target = tmp_path / "feedback.jsonl"
    call_command("export_feedback", "--output", str(target), stderr=io.StringIO())
    assert [json.loads(line)["rating"] for line in target.read_text().splitlines()] == ["down"]

    AnswerFeedback.objects.update(created="2025-01-01T00:00Z", updated="2025-01-02T00:00Z")
    assert export_lines("--since", "2025-01-02") and not export_lines("--since", "2025-01-03")
    with pytest.raises(CommandError, match="not a date"):
        export_lines("--since", "last week")


def test_the_export_costs_the_same_queries_for_few_and_many_ratings(user):
    counts = []
    for total in (1, 30):
        AnswerFeedback.objects.all().delete()
        for n in range(total):
            conversation = conversation_for(user)
            _, answer = exchange(conversation, f"q{n}", f"a{n}")
            services.rate_answer(user, answer.pk, "up")
        with CaptureQueriesContext(connection) as queries:
            assert len(export_lines()) == total
        counts.append(len(queries))
    assert counts[0] == counts[1]


@pytest.fixture
def staff_client(db):
    return signed_in(make_staff("evals@example.com", is_superuser=True))


def test_staff_see_ratings_and_with_a_reason_the_conversation_and_export_them(branched, staff_client):
    changelist = reverse("admin:chat_answerfeedback_changelist")
    listing = staff_client.get(changelist)
    text = listing.content.decode()
    assert listing.status_code == 200
    assert "Name a bakery." in text and f"#{branched.pk}" in text
    # The model column names the model that wrote the answer (it read the admin's own class before).
    assert ">sim-small</td>" in text and "on answer None" not in text
    # What was said is not in the list: it is read on a rating's page, with a reason (tests/console/test_reading_conversations.py).
    assert "Something sweet, not a drink?" not in text and "Pastéis de nata." not in text
    assert staff_client.get(changelist, {"rating__exact": "up"}).content.decode().count("Name a bakery.") == 0
    assert "Name a bakery." in staff_client.get(changelist, {"message__model": "sim-small"}).content.decode()

    feedback = AnswerFeedback.objects.get()
    page = reverse("admin:chat_answerfeedback_change", args=[feedback.pk])
    detail = staff_client.post(page, {"reason": "Evaluating sim-small"}).content.decode()
    assert "Where should I eat?" in detail and "Try the bifanas." in detail and "Pastéis de nata." in detail
    assert "Ginjinha." not in detail  # the other branch is not what led to the answer

    exported = staff_client.post(
        changelist,
        {"action": "export_jsonl", ACTION_CHECKBOX_NAME: [feedback.pk], "apply": "1", "reason": "Evaluation"},
    )
    assert exported.status_code == 200 and "attachment" in exported["Content-Disposition"]
    lines = b"".join(exported.streaming_content).decode().splitlines()
    assert [json.loads(line) for line in lines] == export_lines()


def test_people_who_are_not_staff_do_not_reach_the_feedback_admin(user_client):
    response = user_client.get(reverse("admin:chat_answerfeedback_changelist"))
    assert response.status_code in (302, 403)

"""Staff read what users wrote only with a recorded reason, wherever the console would show it: the
conversation page, answer feedback (the conversation up to the rated answer) and its JSONL export,
shared links. Every reading and every export is in the audit log."""

import io
import json

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.management import call_command
from django.urls import reverse

from audit.models import AuditEntry
from chat.feedback import services as feedback
from chat.models import AnswerFeedback
from chat.sharing.services import share_conversation
from tests.chat.factories import conversation_for, exchange
from tests.conftest import make_user

TITLE = "Holiday plans in Lisbon"
PROMPT = "Answer as a travel agent."
QUESTION = "Where should I stay near the river?"
ANSWER = "Alfama, above the river."
PRIVATE = (TITLE, PROMPT, QUESTION, ANSWER)
FEEDBACK_LIST = "admin:chat_answerfeedback_changelist"


def page_text(response) -> str:
    return response.content.decode()


def shows_nothing_private(text: str) -> bool:
    return not [private for private in PRIVATE if private in text]


@pytest.fixture
def owner(db):
    return make_user("ada@example.com")


@pytest.fixture
def conversation(owner):
    return conversation_for(owner, title=TITLE, system_prompt=PROMPT)


@pytest.fixture
def rating(owner, conversation) -> AnswerFeedback:
    _, answer = exchange(conversation, QUESTION, ANSWER)
    feedback.rate_answer(owner, answer.pk, "down", "Name a street.")
    return AnswerFeedback.objects.get()


def test_a_moderator_opening_a_rating_is_asked_for_a_reason_before_any_conversation_text(
    moderator_client, moderator, rating, conversation
):
    url = reverse("admin:chat_answerfeedback_change", args=[rating.pk])

    asked = moderator_client.get(url)
    assert asked.status_code == 200
    assert 'name="reason"' in page_text(asked) and "Name a street." in page_text(asked)  # the rating is not private
    assert shows_nothing_private(page_text(asked))
    refused = moderator_client.post(url, {"reason": "  "})
    assert "Give a reason" in page_text(refused) and shows_nothing_private(page_text(refused))
    assert not AuditEntry.objects.exists()

    shown = page_text(moderator_client.post(url, {"reason": "Evaluating sim-small's bad answers"}))

    assert PROMPT in shown and QUESTION in shown and ANSWER in shown
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.target_type, entry.target_id, entry.reason) == (
        moderator,
        "conversation.view",
        "chat.conversation",
        str(conversation.pk),
        "Evaluating sim-small's bad answers",
    )
    assert entry.details["feedback_id"] == rating.pk and entry.details["message_id"] == rating.message_id


def test_the_ratings_list_shows_no_conversation_text(moderator_client, rating):
    listing = moderator_client.get(reverse(FEEDBACK_LIST))
    assert listing.status_code == 200
    assert "Name a street." in page_text(listing) and f"#{rating.message_id}" in page_text(listing)
    assert shows_nothing_private(page_text(listing))


def test_exporting_ratings_asks_for_a_reason_and_is_audited_with_the_row_count(
    moderator_client, moderator, owner, conversation, rating
):
    _, second = exchange(conversation, "And to eat?", "Bifanas.")
    feedback.rate_answer(owner, second.pk, "up")
    ids = list(AnswerFeedback.objects.values_list("pk", flat=True))
    changelist = reverse(FEEDBACK_LIST)

    asked = moderator_client.post(changelist, {"action": "export_jsonl", ACTION_CHECKBOX_NAME: ids})
    assert asked.status_code == 200 and "attachment" not in asked.get("Content-Disposition", "")
    assert 'name="reason"' in page_text(asked) and shows_nothing_private(page_text(asked))
    refused = moderator_client.post(
        changelist, {"action": "export_jsonl", ACTION_CHECKBOX_NAME: ids, "apply": "1", "reason": " "}
    )
    assert "Give a reason" in page_text(refused) and not AuditEntry.objects.exists()

    exported = moderator_client.post(
        changelist, {"action": "export_jsonl", ACTION_CHECKBOX_NAME: ids, "apply": "1", "reason": "Weekly evaluation"}
    )

    assert "attachment" in exported["Content-Disposition"]
    records = [json.loads(line) for line in b"".join(exported.streaming_content).decode().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(ids)
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason, entry.details["rows"]) == (
        moderator,
        "feedback.export",
        "Weekly evaluation",
        2,
    )


def test_exporting_every_rating_of_a_filter_keeps_the_selection_across_the_reason_page(
    moderator_client, owner, conversation, rating
):
    _, second = exchange(conversation, "And to eat?", "Bifanas.")
    feedback.rate_answer(owner, second.pk, "up")
    changelist = reverse(FEEDBACK_LIST) + "?rating__exact=down"
    chosen = {"action": "export_jsonl", ACTION_CHECKBOX_NAME: [rating.pk], "select_across": "1"}

    asked = page_text(moderator_client.post(changelist, chosen))
    assert 'name="select_across" value="1"' in asked

    exported = moderator_client.post(changelist, {**chosen, "apply": "1", "reason": "Every thumbs down"})
    assert [json.loads(line)["id"] for line in b"".join(exported.streaming_content).decode().splitlines()] == [
        rating.pk
    ]
    assert AuditEntry.objects.get(action="feedback.export").details["rows"] == 1


def test_the_command_line_export_is_audited_with_its_row_count_and_reason(rating):
    call_command("export_feedback", "--reason", "Quarterly evaluation", stdout=io.StringIO(), stderr=io.StringIO())

    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason, entry.details["rows"]) == (
        None,
        "feedback.export",
        "Quarterly evaluation",
        1,
    )
    assert entry.details["via"] == "manage.py export_feedback"


def test_shared_links_pages_show_no_conversation_title_or_text(moderator_client, owner, conversation, rating):
    share, _ = share_conversation(owner, conversation.pk)
    changelist = reverse("admin:chat_sharedconversation_changelist")

    for response in (
        moderator_client.get(changelist),
        moderator_client.get(reverse("admin:chat_sharedconversation_change", args=[share.pk])),
        moderator_client.get(reverse("admin:chat_sharedconversation_history", args=[share.pk])),
        moderator_client.post(changelist, {"action": "take_down", ACTION_CHECKBOX_NAME: [share.pk]}),
    ):
        assert response.status_code == 200
        assert shows_nothing_private(page_text(response)) and f"#{conversation.pk}" in page_text(response)


def test_neither_a_conversations_history_nor_the_audit_log_names_what_was_said(
    moderator_client, admin_client, conversation, rating
):
    history = moderator_client.get(reverse("admin:chat_conversation_history", args=[conversation.pk]))
    assert history.status_code == 200 and shows_nothing_private(page_text(history))
    admin_client.post(reverse("admin:chat_conversation_change", args=[conversation.pk]), {"reason": "Abuse report"})
    admin_client.post(
        reverse("admin:chat_answerfeedback_change", args=[rating.pk]), {"reason": "Evaluating bad answers"}
    )
    assert AuditEntry.objects.filter(action="conversation.view").count() == 2

    log = moderator_client.get(reverse("admin:audit_auditentry_changelist"))
    assert shows_nothing_private(page_text(log)) and f"Conversation #{conversation.pk}" in page_text(log)


def test_an_answer_read_with_a_reason_shows_its_request_id_and_its_trace_linked_to_the_trace_backend(
    admin_client, conversation, settings
):
    _, answer = exchange(conversation, QUESTION, ANSWER)
    answer.request_id, answer.trace_id = "5f0c3a9e", "4bf92f3577b34da6a3ce929d0e0e4736"
    answer.save(update_fields=["request_id", "trace_id"])
    url = reverse("admin:chat_conversation_change", args=[conversation.pk])

    settings.TRACE_URL_TEMPLATE = "https://jaeger.example.com/trace/{trace_id}"
    shown = page_text(admin_client.post(url, {"reason": "A slow answer reported"}))
    assert "<code>5f0c3a9e</code>" in shown
    assert (
        '<a href="https://jaeger.example.com/trace/4bf92f3577b34da6a3ce929d0e0e4736" target="_blank" rel="noopener">'
        "<code>4bf92f3577b34da6a3ce929d0e0e4736</code></a>"
    ) in shown

    settings.TRACE_URL_TEMPLATE = ""  # no trace backend: the id alone, to search for
    shown = page_text(admin_client.post(url, {"reason": "A slow answer reported"}))
    assert "<code>4bf92f3577b34da6a3ce929d0e0e4736</code>" in shown and "jaeger.example.com" not in shown

"""New chats a day: a plan's `new_chats_per_day` caps the conversations one person starts in any 24
hours (a probe made 150 with 4 KB system prompts in 1.5 s, without limit). History is never capped:
chats already there stay, and writing in them is never refused by this rule.

Every way a chat starts counts in the one window: `POST /chat/api/conversations` (scripts), and the
first message of a new chat (the page's way, over HTTP or the WebSocket; live in test_refusals.py).
"""

import time
from unittest import mock

import pytest
from django.urls import reverse

from chat import services
from chat.models import Conversation
from config.refusals import RateLimited
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

DAY = 24 * 3600


def test_one_new_chat_more_than_the_plan_allows_a_day_is_refused_with_when_and_what_to_do(user):
    put_on_plan(user, "free", new_chats_per_day=3)
    for n in range(3):
        services.create_conversation(user, title=f"chat {n}", system_prompt="x" * 4000)

    with pytest.raises(RateLimited) as refused:
        services.create_conversation(user, title="one too many", system_prompt="x" * 4000)

    assert (refused.value.status, refused.value.code) == (429, "new_chat_limit")
    assert DAY - 60 <= refused.value.retry_after <= DAY
    assert refused.value.message == (
        "You started 3 new chats in the last 24 hours, the most the Free plan allows. You can start another "
        "in 24 hours; until then, keep writing in the chats you have, or upgrade to Plus for 500 a day."
    )
    assert Conversation.objects.filter(owner=user).count() == 3  # nothing half-saved


def test_the_window_moves_deleting_chats_gives_nothing_back_and_each_person_has_their_own(user, other_user):
    put_on_plan(user, "plus", new_chats_per_day=2)
    put_on_plan(other_user, "plus", new_chats_per_day=2)
    # Two chats started two days ago have left the window; one started 23 hours ago has not.
    for seconds_ago in (2 * DAY + 60, 2 * DAY + 30):
        with mock.patch("time.time", return_value=time.time() - seconds_ago):
            services.create_conversation(user)
    with mock.patch("time.time", return_value=time.time() - 23 * 3600):
        recent = services.create_conversation(user)

    services.create_conversation(user)
    services.delete_conversation(user, recent.pk)  # deleting does not hand the place back
    with pytest.raises(RateLimited) as refused:
        services.create_conversation(user)
    assert "You started 2 new chats in the last 24 hours, the most the Plus plan allows." in refused.value.message
    assert "You can start another in 60 minutes;" in refused.value.message  # when the 23-hour-old one leaves

    services.create_conversation(other_user)  # someone else's window


def test_the_json_endpoint_answers_429_with_retry_after_and_the_sentence(user_client, user):
    put_on_plan(user, "free", new_chats_per_day=1)
    url = reverse("chat:conversations")
    assert user_client.post(url, {"title": "first"}, content_type="application/json").status_code == 201

    refused = user_client.post(url, {"title": "second"}, content_type="application/json")

    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "new_chat_limit"
    assert error["message"].startswith("You started 1 new chat in the last 24 hours, the most the Free plan allows.")
    assert int(refused["Retry-After"]) == error["retry_after"] > DAY - 60
    assert Conversation.objects.filter(owner=user).count() == 1


def test_on_the_plan_with_the_most_no_upgrade_is_offered(user):
    put_on_plan(user, "pro", new_chats_per_day=1)
    services.create_conversation(user)
    with pytest.raises(RateLimited) as refused:
        services.create_conversation(user)
    assert refused.value.message.endswith("until then, keep writing in the chats you have.")

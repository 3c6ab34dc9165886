"""A refusal is answered in one form per request, whoever refuses (config.http decides it once): the
chat's endpoints and any request asking for JSON get the JSON error, the API OpenAI's error object, a
person a page; and the status and Retry-After come from the refusal, on a page that shows its form
again as much as anywhere else."""

import pytest
from django.test import Client
from django.urls import reverse

from accounts.api_keys import create_api_key, revoke_api_key
from tests.chat.factories import conversation_for
from tests.conftest import make_user
from tests.support.plans import put_on_plan

JSON_ONLY = {"HTTP_ACCEPT": "application/json"}


@pytest.fixture
def someone_elses_conversation(db):
    return conversation_for(make_user("grace@example.com"))


def test_a_program_asking_for_json_gets_the_json_error_from_every_kind_of_refusal(
    user_client, someone_elses_conversation
):
    # A page view whose rule refuses (someone else's conversation is "not found").
    not_found = user_client.get(f"/c/{someone_elses_conversation.pk}/", **JSON_ONLY)
    assert not_found.status_code == 404
    assert not_found.json()["error"]["code"] == "not_found"
    # Django's CSRF check, on a form the settings page posts.
    refused = Client(enforce_csrf_checks=True).post(reverse("settings"), {"display_name": "Ada"}, **JSON_ONLY)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "csrf_failed"


def test_a_person_gets_the_page_and_the_chat_its_json_error_for_the_same_refusal(
    user_client, someone_elses_conversation
):
    page = user_client.get(f"/c/{someone_elses_conversation.pk}/", HTTP_ACCEPT="text/html,*/*;q=0.8")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
    endpoint = user_client.get(f"/chat/api/conversations/{someone_elses_conversation.pk}")
    assert endpoint.status_code == 404 and endpoint.json()["error"]["code"] == "not_found"


def test_a_page_that_shows_its_refusal_beside_the_form_carries_the_refusals_status_and_retry_after(user, user_client):
    put_on_plan(user, "plus", max_api_keys=1)
    for n in range(2):
        key, _ = create_api_key(user, f"key {n}")
        revoke_api_key(user, key.pk)

    refused = user_client.post(reverse("account_api_keys"), {"name": "third today"})

    assert refused.status_code == 429
    assert 24 * 3600 - 60 <= int(refused["Retry-After"]) <= 24 * 3600
    assert "You made 2 API keys in the last 24 hours" in refused.content.decode()

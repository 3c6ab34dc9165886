"""The Settings page and the theme toggle's endpoint (views over accounts.preferences)."""

import json

import pytest

from tests.chat.factories import conversation_for
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

FORM = {"display_name": "Ada L.", "theme": "dark", "default_model": "", "custom_instructions": "I teach maths."}


def test_the_page_shows_what_is_saved_and_the_real_shortcuts(user_client, user):
    user.custom_instructions = "Be terse."
    user.save()
    page = user_client.get("/settings/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Be terse." in html and "Custom instructions" in html
    for shortcut in ("Shift</kbd> + <kbd>Enter", "<kbd>Esc</kbd>", "<kbd>?</kbd>"):
        assert shortcut in html
    assert 'value="sim-large"' in html and "(not in your plan)" in html  # Free: the large model is listed, disabled


def test_saving_redirects_to_the_page_and_keeps_every_field(user_client, user):
    response = user_client.post("/settings/", FORM)
    assert response.status_code == 303 and response["Location"] == "/settings/"
    user.refresh_from_db()
    assert (user.display_name, user.theme, user.custom_instructions) == ("Ada L.", "dark", "I teach maths.")
    page = user_client.get("/settings/")
    assert "Settings saved." in page.content.decode()
    assert 'data-theme-setting="dark"' in page.content.decode()  # every page renders the saved theme


def test_a_refusal_keeps_what_was_typed_and_says_why(user_client, user):
    put_on_plan(user, "free")
    response = user_client.post("/settings/", {**FORM, "default_model": "sim-large"})
    assert response.status_code == 403
    html = response.content.decode()
    assert "not included in the Free plan" in html and "I teach maths." in html
    user.refresh_from_db()
    assert user.custom_instructions == ""


def test_a_plus_user_can_choose_the_large_model(user_client, user):
    put_on_plan(user, "plus")
    assert user_client.post("/settings/", {**FORM, "default_model": "sim-large"}).status_code == 303
    user.refresh_from_db()
    assert user.default_model == "sim-large"
    boot = user_client.get("/").context["bootstrap"]
    assert boot["preferred_model"] == boot["default_model"] == "sim-large"


def test_the_theme_toggle_saves_the_setting(user_client, user):
    assert user_client.post("/settings/theme", {"theme": "dark"}).status_code == 204
    user.refresh_from_db()
    assert user.theme == "dark"
    refused = user_client.post("/settings/theme", {"theme": "neon"})
    assert refused.status_code == 400 and "Choose a theme" in refused.json()["error"]["message"]


def test_settings_need_a_signed_in_user(client):
    assert client.get("/settings/").status_code == 302
    assert client.post("/settings/theme", {"theme": "dark"}).status_code == 302


def test_settings_are_linked_from_the_chat_sidebar_and_the_header(user_client):
    chat = user_client.get("/").content.decode()
    assert 'class="user-settings" href="/settings/"' in chat
    usage = user_client.get("/billing/usage/").content.decode()
    assert '<a href="/settings/">Settings</a>' in usage


def test_a_conversations_system_prompt_is_read_and_changed_over_the_chat_api(user_client, user):
    conversation = conversation_for(user, system_prompt="")
    url = f"/chat/api/conversations/{conversation.pk}"
    changed = user_client.patch(url, json.dumps({"system_prompt": "Reply in haiku."}), content_type="application/json")
    assert changed.status_code == 200 and changed.json()["system_prompt"] == "Reply in haiku."
    assert user_client.get(url).json()["conversation"]["system_prompt"] == "Reply in haiku."
    listed = user_client.get("/chat/api/conversations").json()["conversations"]
    assert "system_prompt" not in listed[0]  # the sidebar's list stays light


def test_archiving_over_the_chat_api_moves_the_chat_to_the_archived_list(user_client, user):
    conversation = conversation_for(user, title="old")
    url = f"/chat/api/conversations/{conversation.pk}"
    assert user_client.patch(url, json.dumps({"archived": True}), content_type="application/json").json()["archived"]
    assert user_client.get("/chat/api/conversations").json()["conversations"] == []
    archived = user_client.get("/chat/api/conversations?archived=1").json()["conversations"]
    assert [c["title"] for c in archived] == ["old"]
    assert user_client.get(f"/c/{conversation.pk}/").status_code == 200  # an archived chat still opens

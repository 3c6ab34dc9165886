"""Custom instructions and a conversation's own system prompt (issue 9: what users of Open WebUI and
LibreChat expect). In-process: the prompt the engine would be sent is the Job that start_turn returns."""

import pytest
from django.conf import settings
from django.utils import translation

from accounts import preferences
from accounts.api_keys import create_api_key
from api.completions import start
from api.requests import parse
from chat import selectors, services
from chat.generation.admission import release_now
from chat.generation.admit import release_holds
from chat.generation.start import start_turn
from chat.generation.turn import resolve_turn
from chat.models import Message
from config.refusals import BadInput, NotAllowed, TooLarge
from config.tokens import estimate_message_tokens
from tests.chat.factories import conversation_for, exchange
from tests.chat.test_query_counts import _conversation, _queries_to_send
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

PRODUCT = {"role": "system", "content": settings.CHAT_DEFAULT_SYSTEM_PROMPT}


def _instruct(user, text: str) -> None:
    preferences.update_settings(user, display_name="", theme="system", default_model="", custom_instructions=text)


def _send(user, content: str, **fields):
    """Start a turn and end its answer at once (no engine here), so the next turn can follow."""
    turn = start_turn(user, content=content, **fields)
    release_now(turn.job.rid)
    Message.objects.filter(pk=turn.assistant_message.pk).update(status=Message.Status.COMPLETED, content="ok")
    return turn


def test_the_prompt_is_product_prompt_then_instructions_then_the_chats_own_then_history(user):
    put_on_plan(user, "plus")
    _instruct(user, "Always answer in French.")
    conversation = conversation_for(user, system_prompt="You are a patient maths tutor.")
    exchange(conversation, "What is 2+2?", "4")

    job = _send(user, "And 3+3?", conversation_id=conversation.pk).job

    assert job.messages == [
        PRODUCT,
        {"role": "system", "content": "Always answer in French."},
        {"role": "system", "content": "You are a patient maths tutor."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ]


def test_a_person_reading_in_another_language_is_answered_in_it(user):
    """The chat tells the model the person's language after the product's prompt (which stays the same
    for everyone); in English, nothing is added."""
    put_on_plan(user, "plus")
    with translation.override("fr"):
        french = _send(user, "Bonjour").job.messages
    with translation.override("en"):
        english = _send(user, "Hello").job.messages

    assert french[0] == PRODUCT
    assert french[1] == {
        "role": "system",
        "content": "The person uses this product in French. Answer in the language they write in; when that is "
        "unclear (a word, a name, code), answer in French.",
    }
    assert english == [PRODUCT, {"role": "user", "content": "Hello"}]


def test_a_program_is_not_told_a_language(user):
    put_on_plan(user, "plus")
    with translation.override("ja"):
        turn = resolve_turn(user, None, api_key_id=1)
    assert turn.language == ""


def test_every_user_shares_the_same_first_message_so_the_engine_caches_it(user, other_user):
    _instruct(user, "I am a chemist.")
    first = _send(user, "hello").job.messages
    second = _send(other_user, "hello").job.messages
    assert first[0] == second[0] == PRODUCT
    assert first[1] == {"role": "system", "content": "I am a chemist."} and second[1]["role"] == "user"


def test_a_new_chat_no_longer_copies_the_product_prompt(user):
    turn = _send(user, "hello")
    assert turn.conversation.system_prompt == ""
    assert turn.job.messages == [PRODUCT, {"role": "user", "content": "hello"}]  # sent once, not twice


def test_changed_instructions_are_used_from_the_next_turn(user):
    put_on_plan(user, "plus")
    conversation = _send(user, "hello").conversation
    _instruct(user, "Use British spelling.")
    user.refresh_from_db()  # as the next request would load the user
    job = _send(user, "again", conversation_id=conversation.pk).job
    assert {"role": "system", "content": "Use British spelling."} in job.messages


def test_the_conversations_system_prompt_set_from_its_menu_is_used_by_the_next_turn(user):
    put_on_plan(user, "plus")
    conversation = _send(user, "hello").conversation
    updated = services.update_conversation(user, conversation.pk, {"system_prompt": "  Reply in haiku.  "})
    assert updated.system_prompt == "Reply in haiku."
    job = _send(user, "spring?", conversation_id=conversation.pk).job
    assert job.messages[:2] == [PRODUCT, {"role": "system", "content": "Reply in haiku."}]


def test_a_system_prompt_must_be_text_and_not_too_long(user, settings):
    settings.CHAT_MAX_SYSTEM_PROMPT_CHARS = 1000
    conversation = conversation_for(user)
    with pytest.raises(TooLarge) as long:
        services.update_conversation(user, conversation.pk, {"system_prompt": "x" * 1001})
    assert long.value.status == 413
    assert long.value.message == "The system prompt is 1,001 characters long; the limit is 1,000. Shorten it."
    with pytest.raises(TooLarge):
        services.create_conversation(user, system_prompt="x" * 1001)
    services.create_conversation(user, system_prompt="x" * 1000)
    with pytest.raises(BadInput):
        services.update_conversation(user, conversation.pk, {"system_prompt": 42})
    conversation.refresh_from_db()
    assert conversation.system_prompt == "Be brief."


def test_the_context_budget_counts_the_custom_instructions(user):
    put_on_plan(user, "free")
    budget = resolve_turn(user, "sim-small").prompt_budget
    product = estimate_message_tokens(settings.CHAT_DEFAULT_SYSTEM_PROMPT)
    question = "q" * ((budget - product - 10) * 4)  # fits on its own, with the product prompt
    _send(user, question)

    _instruct(user, "i" * 2000)  # about 500 tokens more
    with pytest.raises(TooLarge) as refused:
        _send(user, question)
    assert refused.value.status == 413
    assert "with your custom instructions" in refused.value.message


def test_api_calls_never_get_the_custom_instructions(user):
    put_on_plan(user, "pro")
    _instruct(user, "Always answer in French.")
    assert resolve_turn(user, "sim-small").custom_instructions == "Always answer in French."
    key, _ = create_api_key(user, "script")
    sent = [{"role": "system", "content": "You are a JSON API."}, {"role": "user", "content": "hi"}]

    generation = start(key, parse({"model": "sim-small", "messages": sent}), "127.0.0.1", None)
    release_holds(generation.reservation, generation.job.rid)

    assert generation.turn.custom_instructions == ""
    assert generation.job.messages == sent


def test_instructions_cost_no_query_of_their_own(user):
    put_on_plan(user, "pro", requests_per_minute=1000)
    _queries_to_send(user, _conversation(user, 1))  # the first of a period also rebuilds the quota counter
    without = _queries_to_send(user, _conversation(user, 3))
    _instruct(user, "Be terse.")
    assert _queries_to_send(user, _conversation(user, 3)) == without


def test_a_new_chat_starts_with_the_default_model_from_settings_while_the_plan_allows_it(user):
    put_on_plan(user, "plus")
    preferences.update_settings(
        user, display_name="", theme="system", default_model="sim-large", custom_instructions=""
    )
    assert _send(user, "hello").conversation.model == "sim-large"

    user.subscriptions.all().delete()  # back on Free, which has only the small model
    assert resolve_turn(user).model.id == "sim-small"


def test_settings_refuse_a_model_the_plan_does_not_include_and_name_the_plan_that_does(user):
    put_on_plan(user, "free")
    with pytest.raises(NotAllowed) as refused:
        preferences.update_settings(
            user, display_name="Ada", theme="dark", default_model="sim-large", custom_instructions=""
        )
    assert refused.value.status == 403 and "Plus" in refused.value.message
    assert refused.value.details["param"] == "default_model"
    user.refresh_from_db()
    assert (user.display_name, user.theme) == ("", "system")  # nothing saved


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("theme", "purple", "Choose a theme"),
        ("default_model", "gpt-9", "no model called"),
        ("custom_instructions", "x" * (preferences.CUSTOM_INSTRUCTIONS_MAX + 1), "keep them under"),
        ("display_name", "n" * 151, "under 150"),
    ],
)
def test_settings_refuse_bad_input_with_a_sentence_naming_the_field(user, field, value, words):
    values = {"display_name": "Ada", "theme": "light", "default_model": "", "custom_instructions": ""}
    with pytest.raises(BadInput) as refused:
        preferences.update_settings(user, **{**values, field: value})
    assert words in refused.value.message and refused.value.details["param"] == field


def test_archived_chats_leave_the_list_and_are_found_under_archived(user):
    kept, archived = conversation_for(user, title="kept"), conversation_for(user, title="put away")
    services.update_conversation(user, archived.pk, {"archived": True})
    assert [c.title for c in selectors.conversations_for(user)] == ["kept"]
    assert [c.title for c in selectors.conversations_for(user, archived=True)] == ["put away"]
    services.update_conversation(user, archived.pk, {"archived": False})
    assert {c.title for c in selectors.conversations_for(user)} == {"kept", "put away"}
    assert kept.pk


def test_the_chat_page_tells_the_system_prompt_dialog_the_servers_limit(user_client, settings):
    settings.CHAT_MAX_SYSTEM_PROMPT_CHARS = 1234
    assert user_client.get("/").context["bootstrap"]["limits"] == {"system_prompt_chars": 1234}


def test_every_conversation_says_whether_it_has_a_system_prompt_but_only_one_says_what(user_client, user):
    """The chat page's header shows a sign for a chat with its own prompt: the list, a turn's conversation
    and the live frames say whether there is one (`has_system_prompt`), only one conversation what it is."""
    with_prompt = conversation_for(user, title="With", system_prompt="Be brief.")
    without = conversation_for(user, title="Without", system_prompt="")
    listed = {c["id"]: c for c in user_client.get("/chat/api/conversations").json()["conversations"]}
    assert listed[with_prompt.pk]["has_system_prompt"] is True
    assert listed[without.pk]["has_system_prompt"] is False
    assert "system_prompt" not in listed[with_prompt.pk]
    one = user_client.get(f"/chat/api/conversations/{with_prompt.pk}").json()["conversation"]
    assert (one["system_prompt"], one["has_system_prompt"]) == ("Be brief.", True)
    cleared = user_client.patch(
        f"/chat/api/conversations/{with_prompt.pk}", {"system_prompt": "   "}, content_type="application/json"
    ).json()
    assert (cleared["system_prompt"], cleared["has_system_prompt"]) == ("", False)

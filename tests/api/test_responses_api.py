"""The Responses API (`/v1/responses`) with the official `openai` SDK, unchanged, against a live server
in front of the simulated worker: the same driver, quotas and ledger as a chat completion."""

import json

import httpx
import openai
import pytest
from django.db import transaction

from accounts.api_keys import create_api_key
from api.models import StoredResponse
from billing.models import UsageRecord
from moderation.backends.rules import bump_version
from moderation.models import Category
from tests.support.plans import put_on_plan

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
ASK_WEATHER = "What is the weather in Paris? Use get_weather."


def ledger_row(response_id: str) -> UsageRecord:
    return UsageRecord.objects.get(generation_id="api:" + response_id.removeprefix("resp_"))


def test_a_response_reports_the_usage_written_to_the_ledger_and_is_stored(client, pro_key):
    response = client.responses.create(model="sim-small", input="Say hello to the test suite.", max_output_tokens=40)

    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status in {"completed", "incomplete"} and response.output_text
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    row = ledger_row(response.id)
    assert row.api_key_id == pro_key[0].pk
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        row.prompt_tokens,
        row.completion_tokens,
        row.prompt_tokens + row.completion_tokens,
    )
    assert response.usage.input_tokens_details.cached_tokens == row.cached_tokens
    stored = StoredResponse.objects.get(pk=response.id)
    assert stored.user_id == pro_key[0].user_id and stored.body["output"][0]["content"][0]["text"] == (
        response.output_text
    )


def test_instructions_are_a_leading_system_message(client):
    plain = client.responses.create(model="sim-small", input="Hello there", max_output_tokens=5)
    instructed = client.responses.create(
        model="sim-small", input="Hello there", instructions="Answer like a pirate, always.", max_output_tokens=5
    )
    assert instructed.instructions == "Answer like a pirate, always."
    # The instructions are part of the prompt the engine read (and billed).
    assert instructed.usage.input_tokens > plain.usage.input_tokens
    assert ledger_row(instructed.id).prompt_tokens == instructed.usage.input_tokens


def test_the_sdk_stream_helper_collects_the_text_and_the_final_response(client):
    deltas, kinds = [], []
    with client.responses.stream(model="sim-small", input="Tell me about the sea.") as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()

    assert final.status == "completed" and len(deltas) > 1
    assert "".join(deltas) == final.output_text
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert final.usage.output_tokens == ledger_row(final.id).completion_tokens
    assert StoredResponse.objects.get(pk=final.id).body["output"][0]["content"][0]["text"] == final.output_text


def test_a_raw_stream_numbers_its_events_and_sends_no_done(server, pro_key):
    with httpx.stream(
        "POST",
        server.base_url + "/v1/responses",
        headers={"Authorization": f"Bearer {pro_key[1]}"},
        json={"model": "sim-small", "input": "Hello", "stream": True, "max_output_tokens": 10},
        timeout=60,
    ) as raw:
        body = raw.read().decode()
    frames = [frame for frame in body.split("\n\n") if frame.strip()]
    events = []
    for frame in frames:
        event_line, data_line = frame.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert "[DONE]" not in body


def test_a_function_tool_round_trip_continues_from_the_stored_response(client):
    first = client.responses.create(model="sim-small", input=ASK_WEATHER, tools=[WEATHER], extra_body={"seed": 1})
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id and call.id.startswith("fc_")
    assert isinstance(json.loads(call.arguments)["city"], str)
    assert first.status == "completed" and first.tools[0].name == "get_weather"
    assert ledger_row(first.id).completion_tokens == first.usage.output_tokens > 0

    second = client.responses.create(
        model="sim-small",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees and sunny"}],
        tools=[WEATHER],
    )
    assert second.status == "completed" and second.previous_response_id == first.id
    assert second.output_text and not [item for item in second.output if item.type == "function_call"]
    # The stored conversation (the question, the call) was part of the prompt, and charged as such.
    assert second.usage.input_tokens > first.usage.input_tokens
    assert ledger_row(second.id).prompt_tokens == second.usage.input_tokens


def test_streamed_function_calls_arrive_as_items_with_argument_deltas(client):
    with client.responses.stream(
        model="sim-small", input=ASK_WEATHER, tools=[WEATHER], tool_choice="required"
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    added = [e.item for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert added and added[0].name == "get_weather" and added[0].arguments == ""
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done.arguments == arguments and json.loads(arguments)["city"]
    [call] = [item for item in final.output if item.type == "function_call"]
    assert call.arguments == arguments and call.call_id == added[0].call_id


def test_a_named_tool_choice_calls_that_tool(client):
    lookup = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    response = client.responses.create(
        model="sim-small",
        input="Hello there",
        tools=[WEATHER, lookup],
        tool_choice={"type": "function", "name": "lookup"},
    )
    assert [item.name for item in response.output if item.type == "function_call"] == ["lookup"]


def test_a_json_schema_format_gives_json_valid_for_the_schema(client):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        model="sim-small",
        input="Ada Lovelace, 36.",
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
        extra_body={"seed": 3},
    )
    person = json.loads(response.output_text)
    assert set(person) == {"name", "age"} and isinstance(person["name"], str) and isinstance(person["age"], int)
    assert response.text.format.type == "json_schema"


def test_a_small_max_output_tokens_is_incomplete(client):
    response = client.responses.create(model="sim-small", input="Tell me a long story.", max_output_tokens=3)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3 == ledger_row(response.id).completion_tokens


def test_someone_elses_previous_response_is_not_found(client, server, other_user):
    mine = client.responses.create(model="sim-small", input="Hello", max_output_tokens=5)
    put_on_plan(other_user, "pro")
    _, raw = create_api_key(other_user, "theirs")
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=raw, max_retries=0) as theirs:
        for unknown in (mine.id, "resp_" + "0" * 32):
            with pytest.raises(openai.NotFoundError) as refused:
                theirs.responses.create(model="sim-small", input="Go on", previous_response_id=unknown)
            assert refused.value.body == {
                "message": f"Previous response with id '{unknown}' not found.",
                "type": "invalid_request_error",
                "param": "previous_response_id",
                "code": "previous_response_not_found",
            }
        with pytest.raises(openai.NotFoundError):
            theirs.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            theirs.responses.delete(mine.id)
    assert StoredResponse.objects.filter(pk=mine.id).exists()
    assert UsageRecord.objects.filter(user=other_user).count() == 0


def test_get_and_delete_a_stored_response(client):
    response = client.responses.create(model="sim-small", input="Hello", max_output_tokens=5, metadata={"run": "7"})
    fetched = client.responses.retrieve(response.id)
    assert (fetched.id, fetched.output_text, fetched.metadata) == (response.id, response.output_text, {"run": "7"})
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="sim-small", input="Go on", previous_response_id=response.id)


def test_store_false_keeps_nothing(client):
    response = client.responses.create(model="sim-small", input="Hello", max_output_tokens=5, store=False)
    assert response.output_text and not StoredResponse.objects.filter(pk=response.id).exists()


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [WEATHER, {"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[1].type"),
        ({"tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": 7}, "temperature"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"background": True}, "background"),
        ({"previous_response_id": 7}, "previous_response_id"),
        ({"input": [{"type": "input_image", "image_url": "https://example.com/a.png"}]}, "input[0].type"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input[0].content[0].type"),
    ],
)
def test_what_is_not_supported_is_a_400_naming_the_parameter(client, kwargs, param):
    arguments = {"model": "sim-small", "input": "Hello", **kwargs}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(**arguments)
    assert refused.value.body["param"] == param, refused.value.body


def test_a_conversation_sent_as_items_is_read_in_order(client):
    response = client.responses.create(
        model="sim-small",
        input=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
            {"role": "user", "content": "How are you?"},
        ],
        max_output_tokens=10,
    )
    assert response.output_text


def test_a_stream_created_with_the_sdk_ends_with_the_whole_response(client):
    events = list(client.responses.create(model="sim-small", input="Say hello.", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    [done] = [e for e in events if e.type == "response.output_text.done"]
    assert events[-1].type == "response.completed" and text and done.text == text
    assert events[-1].response.output[0].content[0].text == text
    assert [e.sequence_number for e in events] == list(range(len(events)))


@pytest.fixture
def handshake_rule(transactional_db):
    with transaction.atomic():
        Category.objects.all().delete()
        Category.objects.create(name="Handshakes", words="handshake", applies_to="output")
    bump_version()
    yield
    Category.objects.all().delete()
    bump_version()


def test_an_answer_moderation_cuts_is_incomplete_and_its_call_withheld(client, handshake_rule):
    text = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    send = {"type": "function", "name": "send_message", "parameters": text}
    arguments = {
        "model": "sim-small",
        "input": "handshake handshake handshake",
        "tools": [send],
        "tool_choice": {"type": "function", "name": "send_message"},
    }
    response = client.responses.create(**arguments)
    assert response.status == "incomplete" and response.incomplete_details.reason == "content_filter"
    assert not [item for item in response.output if item.type == "function_call"]
    assert ledger_row(response.id).completion_tokens > 0

    with client.responses.stream(**arguments) as stream:
        events = list(stream)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "content_filter"
    assert not [item for item in events[-1].response.output if item.type == "function_call"]


def test_an_input_too_long_for_the_context_names_input(client):
    # (The chat completion's refusal of a prompt too long, by the same rule; its status is the rule's.)
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="sim-small", input="word " * 20_000)
    assert refused.value.body["param"] == "input"


def test_refusals_before_the_answer_are_the_chat_completions_own(server, transactional_db, other_user):
    put_on_plan(other_user, "free", requests_per_minute=1, allows_api_keys=True)
    _, raw = create_api_key(other_user, "free tier")
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=raw, max_retries=0) as client:
        client.responses.create(model="sim-small", input="Hello", max_output_tokens=5)
        with pytest.raises(openai.RateLimitError) as refused:
            client.responses.create(model="sim-small", input="Hello", max_output_tokens=5, stream=True)
        assert 0 < int(refused.value.response.headers["Retry-After"]) <= 60
        with pytest.raises(openai.PermissionDeniedError):
            client.responses.create(model="sim-large", input="Hello")
    with (
        openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-sgl-nonsense", max_retries=0) as stranger,
        pytest.raises(openai.AuthenticationError),
    ):
        stranger.responses.create(model="sim-small", input="Hello")
    assert UsageRecord.objects.filter(user=other_user).count() == 1


def test_a_repeated_fixed_response_says_it_came_from_the_cache_and_store_false_is_never_cached(client):
    ask = {"model": "sim-small", "input": "Name a colour.", "temperature": 0, "max_output_tokens": 16}

    first = client.responses.with_raw_response.create(**ask)
    again = client.responses.with_raw_response.create(**ask)
    private = client.responses.with_raw_response.create(**ask, store=False)

    assert (first.headers["x-cache"], again.headers["x-cache"]) == ("miss", "hit")
    assert again.parse().output_text == first.parse().output_text
    assert private.headers["x-cache"] == "bypass"

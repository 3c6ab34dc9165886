"""The `openai` Python SDK, as agent and extraction code calls it: tools with a round trip, streamed
tool calls, `.parse()` with a Pydantic model, JSON mode, n choices, logprobs."""

import json
import re

import openai
import pytest
from pydantic import BaseModel

from billing.models import UsageRecord

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris? Use get_weather."}]


@pytest.fixture
def client(api):
    base_url, key = api
    with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=120) as client:
        yield client


def rows(completion_id: str) -> list[UsageRecord]:
    return list(UsageRecord.objects.filter(generation_id="api:" + completion_id.removeprefix("chatcmpl-")))


def test_a_tool_is_called_and_its_result_answered(client):
    first = client.chat.completions.create(model="sim-small", messages=ASK_WEATHER, tools=[WEATHER], seed=1)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id and call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    # The call's tokens are output, billed like text.
    [row] = rows(first.id)
    assert row.completion_tokens == first.usage.completion_tokens > 0

    # The program runs the tool and sends the result back, as every agent loop does.
    second = client.chat.completions.create(
        model="sim-small",
        messages=[
            *ASK_WEATHER,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"},
        ],
        tools=[WEATHER],
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content and not second.choices[0].message.tool_calls
    # The tool definitions and the round trip were part of the prompt.
    assert second.usage.prompt_tokens > first.usage.prompt_tokens


def test_streamed_tool_calls_arrive_in_openai_chunk_shape(client):
    stream = client.chat.completions.create(
        model="sim-small",
        messages=ASK_WEATHER,
        tools=[WEATHER],
        tool_choice="required",
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    calls = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert calls[0].id and calls[0].function.name == "get_weather" and calls[0].type == "function"
    assert all(c.index == 0 for c in calls)
    assert all(c.id is None and c.function.name is None for c in calls[1:])
    arguments = "".join(c.function.arguments or "" for c in calls)
    assert isinstance(json.loads(arguments)["city"], str)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    assert chunks[-1].usage.completion_tokens > 0


def test_the_sdk_stream_helper_assembles_the_call(client):
    with client.chat.completions.stream(
        model="sim-small", messages=ASK_WEATHER, tools=[WEATHER], tool_choice="required"
    ) as stream:
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"]


def test_a_named_tool_choice_calls_that_tool(client):
    lookup = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    completion = client.chat.completions.create(
        model="sim-small",
        messages=[{"role": "user", "content": "Hello there"}],
        tools=[WEATHER, lookup],
        tool_choice={"type": "function", "function": {"name": "lookup"}},
    )
    assert [c.function.name for c in completion.choices[0].message.tool_calls] == ["lookup"]


class Person(BaseModel):
    name: str
    age: int
    languages: list[str]


def test_parse_returns_a_pydantic_object(client):
    completion = client.chat.completions.parse(
        model="sim-small",
        messages=[{"role": "user", "content": "Ada Lovelace, 36, spoke English and French."}],
        response_format=Person,
        seed=3,
    )
    person = completion.choices[0].message.parsed
    assert isinstance(person, Person)
    assert Person.model_validate_json(completion.choices[0].message.content) == person


def test_json_mode_answers_a_json_object(client):
    completion = client.chat.completions.create(
        model="sim-small",
        messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format={"type": "json_object"},
    )
    assert isinstance(json.loads(completion.choices[0].message.content), dict)


def test_a_regex_through_extra_body_shapes_the_answer(client):
    completion = client.chat.completions.create(
        model="sim-small",
        messages=[{"role": "user", "content": "A date, please."}],
        extra_body={"regex": r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]"},
    )
    assert re.fullmatch(r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]", completion.choices[0].message.content)


def test_n_choices_are_written_and_billed_each(client):
    completion = client.chat.completions.create(
        model="sim-small", messages=[{"role": "user", "content": "Name a colour."}], n=2, max_tokens=12, seed=5
    )
    assert [c.index for c in completion.choices] == [0, 1]
    assert all(c.message.content for c in completion.choices)
    assert completion.choices[0].message.content != completion.choices[1].message.content
    [row] = rows(completion.id)
    assert row.completion_tokens == completion.usage.completion_tokens
    assert completion.usage.completion_tokens > max(len(c.message.content.split()) for c in completion.choices)


def test_n_choices_stream_with_their_indexes(client):
    chunks = list(
        client.chat.completions.create(
            model="sim-small", messages=[{"role": "user", "content": "Name a colour."}], n=2, max_tokens=8, stream=True
        )
    )
    texts = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts[0] and texts[1]
    finished = sorted(ch.index for c in chunks for ch in c.choices if ch.finish_reason)
    assert finished == [0, 1]


def test_logprobs_come_from_the_sampler(client):
    completion = client.chat.completions.create(
        model="sim-small",
        messages=[{"role": "user", "content": "Say something."}],
        logprobs=True,
        top_logprobs=3,
        max_tokens=10,
    )
    entries = completion.choices[0].logprobs.content
    assert entries and "".join(e.token for e in entries) == completion.choices[0].message.content
    for entry in entries:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)


def test_a_schema_the_engine_cannot_compile_is_a_400_with_its_reason(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="sim-small",
            messages=[{"role": "user", "content": "hi"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "odd", "schema": {"type": "integer", "multipleOf": 3}},
            },
        )
    assert "grammar" in refused.value.message


def test_a_text_completion_continues_the_prompt(client):
    completion = client.completions.create(model="sim-small", prompt="Once upon a time", max_tokens=12, seed=2)
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
    choice = completion.choices[0]
    assert choice.text and choice.finish_reason in {"stop", "length"}
    [row] = rows(completion.id.removeprefix("cmpl-"))
    assert (row.prompt_tokens, row.completion_tokens) == (
        completion.usage.prompt_tokens,
        completion.usage.completion_tokens,
    )
    # With no max_tokens, OpenAI's default of 16 applies.
    short = client.completions.create(model="sim-small", prompt="Count: one two three")
    assert short.usage.completion_tokens <= 16


def test_a_streamed_text_completion_with_echo_and_usage(client):
    chunks = list(
        client.completions.create(
            model="sim-small",
            prompt="The lighthouse",
            max_tokens=10,
            echo=True,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text.startswith("The lighthouse") and len(text) > len("The lighthouse")
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] in (
        ["stop"],
        ["length"],
    )
    assert chunks[-1].usage.completion_tokens > 0


def test_what_a_text_completion_cannot_do_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="sim-small", prompt="hi", suffix="bye")
    assert refused.value.body["param"] == "suffix"
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="sim-small", prompt=["one", "two"])
    assert refused.value.body["param"] == "prompt"

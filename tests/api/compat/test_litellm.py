"""`litellm` as a client (its `openai/` provider pointed at the product): tools, response_format, and
its ContextWindowExceededError on an over-long prompt, which its context-window fallbacks rely on."""

import json

import litellm
import pytest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def call(api):
    base_url, key = api

    def call(**kwargs):
        return litellm.completion(model="openai/sim-small", api_base=base_url, api_key=key, num_retries=0, **kwargs)

    return call


def test_tools(call):
    response = call(
        messages=[{"role": "user", "content": "What is the weather in Rome? Use get_weather."}], tools=[WEATHER]
    )
    [tool_call] = response.choices[0].message.tool_calls
    assert response.choices[0].finish_reason == "tool_calls"
    assert tool_call.function.name == "get_weather" and json.loads(tool_call.function.arguments)["city"]


def test_response_format(call):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    response = call(
        messages=[{"role": "user", "content": "Answer in JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}},
    )
    assert isinstance(json.loads(response.choices[0].message.content)["answer"], str)


def test_an_over_long_prompt_raises_context_window_exceeded(call):
    # A 400 context_length_exceeded, as OpenAI sends it: what litellm's context-window fallbacks catch.
    with pytest.raises(litellm.ContextWindowExceededError):
        call(messages=[{"role": "user", "content": "x" * 200_000}])

"""What a program may put in a chat completion request: every OpenAI field agent and extraction
frameworks send is read, checked with a 400 naming the parameter, and passed to the engine as
SGLang's OpenAI-compatible route expects it; nothing is dropped silently."""

import pytest

from api.requests import InvalidRequest, parse

HELLO = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def refused(body: dict) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse({"model": "m", "messages": HELLO, **body})
    return caught.value


def test_neutral_values_and_nulls_are_the_field_left_out():
    ask = parse(
        {
            "model": "m",
            "messages": HELLO,
            "logprobs": False,
            "tools": [],
            "tool_choice": "none",
            "response_format": {"type": "text"},
            "presence_penalty": 0,
            "frequency_penalty": 0.0,
            "logit_bias": {},
            "n": 1,
            "temperature": None,
            "stop": None,
            "parallel_tool_calls": None,
        }
    )
    assert ask.engine_fields == {}
    assert ask.n == 1 and not ask.logprobs and ask.temperature is None


def test_tools_and_a_named_choice_reach_the_engine_as_sent():
    ask = parse(
        {
            "model": "m",
            "messages": HELLO,
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": False,
        }
    )
    assert ask.engine_fields == {
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
    }
    assert ask.tools == [WEATHER]


def test_tool_choice_none_offers_no_tools():
    ask = parse({"model": "m", "messages": HELLO, "tools": [WEATHER], "tool_choice": "none"})
    assert "tools" not in ask.engine_fields


@pytest.mark.parametrize(
    "body, param, says",
    [
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "not found",
        ),
        ({"tool_choice": "required"}, "tool_choice", "Tools cannot be empty"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name", "letters"),
        ({"tools": [{"type": "retrieval"}]}, "tools[0]", "'type': 'function'"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name", "Two tools"),
        (
            {"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
            "tool_choice",
            "cannot be combined",
        ),
        ({"functions": [{"name": "f"}]}, "functions", "send 'tools'"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
            "required",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}}},
            "response_format.json_schema.strict",
            "true or false",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format", "json_schema"),
        ({"response_format": {"type": "json_object"}, "regex": "[a-z]+"}, "regex", "Only one of"),
        ({"top_logprobs": 2}, "top_logprobs", "needs 'logprobs': true"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "at most 20"),
        ({"logit_bias": {"hello": 1}}, "logit_bias", "token ids"),
        ({"logit_bias": {"15": 101}}, "logit_bias", "-100 to 100"),
        ({"presence_penalty": 3}, "presence_penalty", "between -2 and 2"),
        ({"top_k": 0}, "top_k", "-1 (off) or at least 1"),
        ({"repetition_penalty": 0}, "repetition_penalty", "above 0"),
        ({"n": 0}, "n", "at least 1"),
        ({"n": 129}, "n", "at most 128"),
        ({"audio": {"voice": "alloy"}}, "audio", "not supported"),
    ],
)
def test_what_cannot_be_served_is_a_400_naming_the_parameter(body, param, says):
    error = refused(body)
    assert error.param == param
    assert says in error.message


def test_a_tool_round_trip_is_read_back_as_the_engine_needs_it():
    ask = parse(
        {
            "model": "m",
            "tools": [WEATHER],
            "messages": [
                *HELLO,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
            ],
        }
    )
    assert ask.messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    }
    assert ask.messages[2] == {"role": "tool", "content": "18 C and sunny", "tool_call_id": "call_1"}


@pytest.mark.parametrize(
    "message, param",
    [
        ({"role": "tool", "content": "18 C"}, "messages[1].tool_call_id"),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{nope"}}],
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
            "messages[1].tool_calls[0].id",
        ),
        ({"role": "assistant", "content": None}, "messages[1].content"),
    ],
)
def test_malformed_tool_turns_are_refused_by_position(message, param):
    messages = (
        [*HELLO, message, {"role": "user", "content": "and?"}] if message["role"] == "assistant" else [*HELLO, message]
    )
    with pytest.raises(InvalidRequest) as caught:
        parse({"model": "m", "messages": messages})
    assert caught.value.param == param


def test_structured_outputs_and_sglang_extensions_pass_through():
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    ask = parse(
        {
            "model": "m",
            "messages": HELLO,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": schema, "strict": True},
            },
            "logprobs": True,
            "top_logprobs": 3,
            "n": 2,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "logit_bias": {"42": -100},
            "top_k": 20,
            "min_p": 0.05,
            "repetition_penalty": 1.1,
        }
    )
    assert ask.engine_fields == {
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}},
        "logprobs": True,
        "top_logprobs": 3,
        "n": 2,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"42": -100},
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
    }
    assert ask.n == 2 and ask.logprobs


def test_sglang_shorthand_schema_and_grammars():
    ask = parse(
        {"model": "m", "messages": HELLO, "response_format": {"type": "json_schema", "schema": {"type": "object"}}}
    )
    assert ask.engine_fields["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert parse({"model": "m", "messages": HELLO, "ebnf": 'root ::= "yes" | "no"'}).engine_fields == {
        "ebnf": 'root ::= "yes" | "no"'
    }

"""The simulated worker's tool calling, on the wire, as SGLang 0.5.23 with --tool-call-parser qwen (§10.1)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from harness.engines import start_simulator
from simulator import tokenizer as tok
from simulator.chat_template import render_chatml
from tests.inference.test_simulator_protocol import sse_payloads

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_web",
        "description": "Search the web for pages",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris today?"}]
CALL_ID = re.compile(r"^call_[0-9a-f]{24}$")


@pytest.fixture(scope="module")
def qwen():
    with start_simulator() as w:  # the harness passes --tool-call-parser qwen
        yield w


@pytest.fixture(scope="module")
def bare():
    with start_simulator(tool_call_parser=None) as w:
        yield w


def post(worker, **body):
    return httpx.post(f"{worker.url}/v1/chat/completions", json=body, timeout=30)


def test_auto_calls_the_matching_tool_in_sglangs_non_streamed_shape(qwen):
    answer = post(qwen, messages=ASK_WEATHER, tools=[SEARCH, WEATHER], temperature=0)
    assert answer.status_code == 200
    choice = answer.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["matched_stop"] is None
    assert choice["logprobs"] is None
    message = choice["message"]
    assert message["role"] == "assistant" and message["content"] == "" and message["reasoning_content"] is None
    [call] = message["tool_calls"]
    assert CALL_ID.match(call["id"]) and call["index"] == 0 and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    args = json.loads(call["function"]["arguments"])
    assert call["function"]["arguments"] == json.dumps(args)  # json.dumps spacing
    assert args["city"] == "Paris" and args["unit"] in ("celsius", "fahrenheit")
    assert "days" not in args or 1 <= args["days"] <= 7


def test_tools_are_rendered_into_the_prompt_so_prompt_tokens_grow(qwen):
    plain = post(qwen, messages=ASK_WEATHER, max_tokens=1).json()["usage"]["prompt_tokens"]
    assert plain == len(tok.encode(render_chatml(ASK_WEATHER)))
    with_tools = post(qwen, messages=ASK_WEATHER, tools=[WEATHER, SEARCH], max_tokens=1).json()
    named = post(
        qwen,
        messages=ASK_WEATHER,
        tools=[WEATHER, SEARCH],
        tool_choice={"type": "function", "function": {"name": "search_web"}},
        max_tokens=1,
    ).json()
    none = post(qwen, messages=ASK_WEATHER, tools=[WEATHER, SEARCH], tool_choice="none", max_tokens=1).json()
    assert with_tools["usage"]["prompt_tokens"] > named["usage"]["prompt_tokens"] > plain
    assert none["usage"]["prompt_tokens"] == plain


def test_auto_without_a_matching_tool_answers_in_text(qwen):
    body = post(qwen, messages=[{"role": "user", "content": "Hello there"}], tools=[WEATHER], temperature=0).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"] and "<tool_call>" not in choice["message"]["content"]


def test_required_and_named_always_call_and_none_never_does(qwen):
    hello = [{"role": "user", "content": "Hello there"}]
    required = post(qwen, messages=hello, tools=[WEATHER, SEARCH], tool_choice="required").json()
    assert required["choices"][0]["finish_reason"] == "tool_calls"
    assert len(required["choices"][0]["message"]["tool_calls"]) >= 1
    named = post(
        qwen,
        messages=ASK_WEATHER,
        tools=[WEATHER, SEARCH],
        tool_choice={"type": "function", "function": {"name": "search_web"}},
    ).json()
    [call] = named["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "search_web" and json.loads(call["function"]["arguments"])["query"]
    none = post(qwen, messages=ASK_WEATHER, tools=[WEATHER], tool_choice="none", temperature=0).json()
    assert "tool_calls" not in none["choices"][0]["message"] and none["choices"][0]["finish_reason"] == "stop"


def test_tools_named_in_the_message_are_called_in_parallel_unless_told_not_to(qwen):
    ask = [{"role": "user", "content": "Use get_weather for Paris and search_web for museums"}]
    both = post(qwen, messages=ask, tools=[WEATHER, SEARCH], temperature=0).json()["choices"][0]["message"]
    names = [c["function"]["name"] for c in both["tool_calls"]]
    assert sorted(names) == ["get_weather", "search_web"] and [c["index"] for c in both["tool_calls"]] == [0, 1]
    one = post(qwen, messages=ask, tools=[WEATHER, SEARCH], temperature=0, parallel_tool_calls=False).json()
    assert len(one["choices"][0]["message"]["tool_calls"]) == 1


def test_a_length_stop_stays_length(qwen):
    body = post(qwen, messages=ASK_WEATHER, tools=[WEATHER], max_tokens=5).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert "tool_calls" not in body["choices"][0]["message"]


def test_arguments_are_deterministic_by_seed(qwen):
    def args(seed):
        body = post(qwen, messages=ASK_WEATHER, tools=[WEATHER], temperature=0.9, seed=seed).json()
        return body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]

    assert args(7) == args(7)
    assert len({args(s) for s in range(8)}) > 1


def test_the_stream_sends_name_then_argument_fragments_then_a_separate_finish(qwen):
    response = post(
        qwen, messages=ASK_WEATHER, tools=[WEATHER], stream=True, stream_options={"include_usage": True}, seed=3
    )
    *chunks, done = sse_payloads(response.text)
    assert done == "[DONE]"
    rid = chunks[0]["id"]
    assert all(c["id"] == rid for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    name_chunk = chunks[1]
    assert name_chunk["usage"] is None
    delta = name_chunk["choices"][0]["delta"]
    assert delta["role"] is None and delta["content"] is None and delta["reasoning_content"] is None
    [head] = delta["tool_calls"]
    assert CALL_ID.match(head["id"]) and head["index"] == 0 and head["type"] == "function"
    assert head["function"] == {"name": "get_weather", "arguments": ""}
    fragments = chunks[2:-2]
    assert len(fragments) > 1
    for chunk in fragments:
        [part] = chunk["choices"][0]["delta"]["tool_calls"]
        assert part["id"] is None and part["function"]["name"] is None and part["index"] == 0
    joined = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for c in fragments)
    assert joined == json.dumps(json.loads(joined))
    assert json.loads(joined)["city"] == "Paris"
    finish, usage = chunks[-2], chunks[-1]
    assert finish["choices"][0]["delta"] == {"reasoning_content": None}
    assert finish["choices"][0]["finish_reason"] == "tool_calls"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    plain = post(qwen, messages=ASK_WEATHER, tools=[WEATHER], seed=3).json()
    assert plain["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == joined


def test_a_tool_result_gets_a_text_answer_that_uses_it(qwen):
    history = [
        *ASK_WEATHER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"},
    ]
    body = post(qwen, messages=history, tools=[WEATHER]).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert "18 degrees and sunny" in choice["message"]["content"]
    streamed = sse_payloads(post(qwen, messages=history, tools=[WEATHER], stream=True).text)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in streamed[:-1] if c["choices"])
    assert text == choice["message"]["content"]
    assert streamed[1]["choices"][0]["delta"] == {
        "role": None,
        "content": streamed[1]["choices"][0]["delta"]["content"],
        "reasoning_content": None,
    }
    # The history is in the prompt as Qwen renders it: the call and the response cost tokens.
    shorter = post(qwen, messages=ASK_WEATHER, tools=[WEATHER], max_tokens=1).json()
    assert body["usage"]["prompt_tokens"] > shorter["usage"]["prompt_tokens"] + 10


def test_request_errors_are_sglangs_400s(qwen):
    def error(**body):
        answer = post(qwen, messages=ASK_WEATHER, **body)
        assert answer.status_code == 400, answer.text
        payload = answer.json()
        assert payload["object"] == "error" and payload["code"] == 400 and payload["param"] is None
        return payload["message"]

    assert error(tools=[], tool_choice="required") == "Tools cannot be empty if tool choice is set to required."
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert error(tool_choice=named) == "Tools cannot be empty if tool choice is set to a specific tool."
    missing = {"type": "function", "function": {"name": "nope"}}
    assert error(tools=[WEATHER], tool_choice=missing) == "Tool 'nope' not found in tools list."
    broken = {"type": "function", "function": {"name": "f", "parameters": {"type": "banana"}}}
    assert error(tools=[WEATHER, broken]).startswith("Tool 1 function has invalid 'parameters' schema: ")
    combined = error(tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"})
    assert combined.startswith(
        "tool_choice 'required' or a named tool cannot be combined with response_format, regex, or ebnf: "
    )
    assert error(tools=[WEATHER], tool_choice=named, regex="[a-z]+").startswith("tool_choice 'required'")
    bad_history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "x"},
    ]
    answer = httpx.post(f"{qwen.url}/v1/chat/completions", json={"messages": bad_history, "tools": [WEATHER]})
    assert answer.status_code == 400
    assert answer.json()["message"] == "Assistant tool call function.arguments must be valid JSON."


def test_calls_to_unknown_tools_are_dropped():
    from simulator.tools import StreamParser, parse_calls

    text = '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    normal, calls = parse_calls("Sure. " + text, {"f"})
    assert normal == "Sure." and [c["function"]["name"] for c in calls] == ["f"] and calls[0]["index"] == 0
    parser = StreamParser({"f"})
    deltas = [d for ch in text for d in parser.feed(ch)] + parser.feed("", final=True)
    heads = [d["tool_calls"][0] for d in deltas if d["tool_calls"][0]["id"]]
    assert [h["function"]["name"] for h in heads] == ["f"] and heads[0]["index"] == 0
    args = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas if not d["tool_calls"][0]["id"])
    assert args == '{"a": 1}'


def test_without_a_parser_tools_are_rendered_but_the_markup_stays_in_content(bare):
    auto = post(bare, messages=ASK_WEATHER, tools=[WEATHER], temperature=0).json()
    choice = auto["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    content = choice["message"]["content"]
    assert content.startswith("<tool_call>\n{") and content.endswith("}\n</tool_call>")
    assert json.loads(content[len("<tool_call>\n") : -len("\n</tool_call>")])["name"] == "get_weather"
    required = post(bare, messages=ASK_WEATHER, tools=[WEATHER], tool_choice="required").json()["choices"][0]
    calls = json.loads(required["message"]["content"])
    assert isinstance(calls, list) and calls[0]["name"] == "get_weather" and "city" in calls[0]["parameters"]
    assert required["finish_reason"] == "stop"


def test_model_info_says_which_tool_call_parser_the_server_runs(qwen, bare):
    # SGLang's /model_info reports its --tool-call-parser (null when none): how an operator, and the
    # product, can tell whether a node turns tool-call markup into tool_calls.
    assert httpx.get(qwen.url + "/model_info").json()["tool_call_parser"] == "qwen"
    assert httpx.get(bare.url + "/model_info").json()["tool_call_parser"] is None

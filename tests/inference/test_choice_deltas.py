"""SGLang's OpenAI-route chunks (tool calls, logprobs, several choices) read into per-choice deltas,
and a completion assembling them as OpenAI's non-streamed answer would carry them."""

import asyncio

from chat.generation.completion import Completion
from inference.stream_decoders import OpenAIStreamDecoder

NULLS = {"role": None, "content": None, "reasoning_content": None}


def sglang_tool_stream():
    """The chunks SGLang 0.5.23 sends for one call (shared/sglang-protocol.md §10.1)."""
    yield {
        "id": "r1",
        "choices": [{"index": 0, "delta": {"reasoning_content": None, "role": "assistant", "content": ""}}],
    }
    yield {
        "id": "r1",
        "usage": None,
        "choices": [
            {
                "index": 0,
                "delta": {
                    **NULLS,
                    "tool_calls": [
                        {
                            "id": "call_abc",
                            "index": 0,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ],
                },
                "finish_reason": None,
            }
        ],
    }
    for fragment in ('{"city": ', '"Par', 'is"}'):
        yield {
            "id": "r1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        **NULLS,
                        "tool_calls": [
                            {"id": None, "index": 0, "type": None, "function": {"name": None, "arguments": fragment}}
                        ],
                    },
                }
            ],
        }
    yield {"id": "r1", "choices": [{"index": 0, "delta": {"reasoning_content": None}, "finish_reason": "tool_calls"}]}
    yield {
        "id": "r1",
        "choices": [],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": 8}},
    }


def test_a_streamed_tool_call_is_assembled_as_openai_gives_it_whole():
    decoder = OpenAIStreamDecoder(choices=True)
    completion = Completion("api")
    events = [event for payload in sglang_tool_stream() for event in decoder.decode(payload)]

    async def feed():
        for event in events:
            if event.text or event.deltas:
                await completion.text(event.text, event.deltas)

    asyncio.run(feed())
    choice = completion.choices[0]
    assert choice.content == ""
    assert choice.finish_reason == "tool_calls"
    assert list(choice.tool_calls.values()) == [
        {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    ]
    assert events[-1].finish_reason == "stop" and events[-1].usage.cached_tokens == 8
    # The arguments are output: what moderation screens and the usage rule counts.
    assert "".join(d.arguments for e in events for d in e.deltas) == '{"city": "Paris"}'


def test_choices_and_logprobs_are_kept_apart_by_index():
    decoder = OpenAIStreamDecoder(choices=True)
    entry = {"token": "Hi", "bytes": [72, 105], "logprob": -0.1, "top_logprobs": []}
    payloads = [
        {"id": "a", "choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": {"content": [entry]}}]},
        {"id": "b", "choices": [{"index": 1, "delta": {"content": "Yo"}, "logprobs": {"content": [entry]}}]},
        {"id": "a", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"id": "b", "choices": [{"index": 1, "delta": {}, "finish_reason": "length"}]},
    ]
    deltas = [d for p in payloads for e in decoder.decode(p) for d in e.deltas]
    assert [(d.index, d.content, len(d.logprobs), d.finish_reason) for d in deltas] == [
        (0, "Hi", 1, None),
        (1, "Yo", 1, None),
        (0, "", 0, "stop"),
        (1, "", 0, "length"),
    ]
    # Without asking for choices, only the first choice's text is read (the web chat's answers).
    plain = OpenAIStreamDecoder()
    assert [e.text for p in payloads for e in plain.decode(p)] == ["Hi"]


def test_a_reader_that_fell_behind_gets_one_piece_per_run_of_text():
    completion = Completion("api")

    async def scenario():
        for word in ("one ", "two ", "three"):
            await completion.text(word)
        return await completion.next_pieces()

    pieces = asyncio.run(scenario())
    assert [(p.index, p.content) for p in pieces] == [(0, "one two three")]

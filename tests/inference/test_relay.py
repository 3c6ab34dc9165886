"""The engine's stream read as the network gives it: whatever the reads' boundaries, the same payloads
in the same order; and a reader that falls behind gets the answer in fewer, larger events, with
nothing lost."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chat.generation import engine
from chat.generation.engine import Job
from harness.engines import start_simulator
from inference import client as client_module
from inference import stream_decoders
from inference.client import GenerationRequest, SGLangClient
from inference.errors import EngineTimeout, EngineUnavailable
from inference.events import ChoiceDelta, Finish, GenerationEvent, Usage, merged_deltas
from inference.stream_decoders import DONE, EventReader, OpenAIStreamDecoder, joined
from tests.inference.test_choice_deltas import sglang_tool_stream

PAYLOADS = [
    {"text": "Hé", "meta_info": {"id": "r1", "completion_tokens": 1}},
    {"text": "llo ✓", "meta_info": {"id": "r1", "completion_tokens": 2}},
    {"text": " wörld", "meta_info": {"id": "r1", "completion_tokens": 3, "finish_reason": {"type": "stop"}}},
]


def sse_bytes(payloads, *, newline="\n") -> bytes:
    events = [f"data: {json.dumps(p, ensure_ascii=False)}{newline}{newline}" for p in payloads]
    return ("".join(events) + f"data: [DONE]{newline}{newline}").encode()


def read_in(pieces: list[bytes]) -> list:
    reader, out = EventReader(), []
    for piece in pieces:
        out += reader.feed(piece)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=12), st.sampled_from(["\n", "\r\n"]))
def test_the_same_payloads_whatever_the_reads_boundaries(cuts, newline):
    whole = sse_bytes(PAYLOADS, newline=newline)
    points = sorted({min(c, len(whole)) for c in cuts})
    pieces = [whole[a:b] for a, b in zip([0, *points], [*points, len(whole)], strict=True)]
    assert read_in(pieces) == [*PAYLOADS, DONE]


def test_one_read_brings_every_payload_it_completes_and_keeps_the_unfinished_line():
    whole = sse_bytes(PAYLOADS)
    reader = EventReader()
    cut = whole.index("wörld".encode())  # in the middle of the third event, in a multi-byte letter
    assert reader.feed(whole[: cut + 2]) == PAYLOADS[:2]
    assert reader.feed(whole[cut + 2 :]) == [PAYLOADS[2], DONE]


def test_comments_other_fields_and_multi_line_events():
    stream = (
        b": keepalive\n\n"
        b"event: message\nid: 7\n"
        b'data: {"text": "a",\n'
        b'data:  "meta_info": {}}\n\n'
        b"data: [1, 2]\n\n"  # JSON, but not an object: ignored
        b"data: [DONE]\n\n"
        b'data: {"text": "after the end"}\n\n'
    )
    assert read_in([stream]) == [{"text": "a", "meta_info": {}}, DONE]


def test_an_endless_line_is_a_broken_engine(monkeypatch):
    monkeypatch.setattr(stream_decoders, "MAX_LINE_BYTES", 1000)
    reader = EventReader()
    reader.feed(b"data: " + b"x" * 900)
    with pytest.raises(EngineUnavailable):
        reader.feed(b"x" * 200)


def test_events_read_together_are_one_event():
    first = GenerationEvent("Hel", Usage(10, 4, 1), rid="r1")
    middle = GenerationEvent("lo", None, rid="r1")
    last = GenerationEvent(" there", Usage(10, 4, 3), "stop", Finish("stop", rid="r1"), "r1")
    one = joined([first, middle, last])
    assert one.text == "Hello there"
    assert one.usage == Usage(10, 4, 3)
    assert one.finish_reason == "stop" and one.finish == last.finish and one.rid == "r1"
    assert joined([first]) is first


@pytest.fixture(scope="module")
def long_answers():
    worker = start_simulator(
        "--min-answer-tokens", "600", "--max-answer-tokens", "600", "--incremental-streaming-output"
    )
    yield worker
    worker.stop()


async def test_a_reader_that_falls_behind_gets_the_answer_in_fewer_events(long_answers):
    messages = [{"role": "user", "content": "Tell me a long story."}]
    async with SGLangClient(long_answers.url) as client:
        whole = await client.generate(GenerationRequest(messages=messages, max_new_tokens=600, temperature=0))
        events = []
        stream = client.generate_stream(GenerationRequest(messages=messages, max_new_tokens=600, temperature=0))
        async for event in stream:
            events.append(event)
            if len(events) == 1:
                # Busy elsewhere: meanwhile the engine's chunks queue up on the connection.
                await asyncio.sleep(0.5)
    assert "".join(e.text for e in events) == whole.text
    assert events[-1].finish_reason == whole.finish_reason and events[-1].usage.completion_tokens == 600
    assert [e for e in events if e.finish_reason] == [events[-1]]
    assert len(events) < 100, f"{len(events)} events for 600 tokens read after a pause"


async def test_after_the_first_token_the_engine_sends_the_text_n_tokens_at_a_time(paced_worker):
    messages = [{"role": "user", "content": "Count to a hundred."}]
    async with SGLangClient(paced_worker.url) as client:
        whole = await client.generate(GenerationRequest(messages=messages, max_new_tokens=41, temperature=0))
        request = GenerationRequest(messages=messages, max_new_tokens=41, temperature=0, stream_interval=4)
        events = [event async for event in client.generate_stream(request)]
    assert "".join(e.text for e in events) == whole.text
    counts = [e.usage.completion_tokens for e in events]
    # Chunks read together are one event with the last one's count: a busy moment only drops counts.
    assert set(counts) <= {1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41} and counts[-1] == 41, counts


@pytest.fixture(scope="module")
def paced_worker():
    worker = start_simulator(speed="realistic")  # about 90 tokens/s: a reader that keeps up sees each chunk
    yield worker
    worker.stop()


async def test_every_answer_asks_the_engine_for_the_configured_stream_interval(paced_worker, settings):
    settings.ENGINE_STREAM_INTERVAL = 3
    job = Job(
        model="sim-small",
        rid=uuid.uuid4().hex,
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=13,
        prompt_estimate=8,
        node="relay",
        url=paced_worker.url,
    )
    counts = [event.usage.completion_tokens async for event in engine.stream(job) if event.usage is not None]
    assert set(counts) <= {1, 4, 7, 10, 13} and counts[-1] == 13, counts


def test_the_stream_interval_is_asked_of_streams_only_and_only_when_given():
    client = SGLangClient("http://127.0.0.1:9")
    messages = [{"role": "user", "content": "Hi"}]
    _, streamed = client._build(GenerationRequest(messages=messages, stream_interval=4), stream=True)
    _, whole = client._build(GenerationRequest(messages=messages, stream_interval=4), stream=False)
    _, default = client._build(GenerationRequest(messages=messages), stream=True)
    assert streamed["sampling_params"]["stream_interval"] == 4
    assert "stream_interval" not in whole["sampling_params"]
    assert "stream_interval" not in default["sampling_params"]


def test_a_last_line_the_engine_did_not_end_is_still_read():
    reader = EventReader()
    assert reader.feed(b'data: {"text": "a"}\n\ndata: {"text": "b"}') == [{"text": "a"}]
    assert reader.close() == [{"text": "b"}]
    assert reader.close() == []


def test_deltas_read_together_name_each_choice_once():
    """A program's client reads each chunk's choices by index (many only choices[0]): a batch of
    tool-call fragments, or of two choices' text, must not repeat a choice."""
    decoder = OpenAIStreamDecoder(choices=True)
    events = [event for payload in sglang_tool_stream() for event in decoder.decode(payload)]
    one = joined(events)
    assert [d.index for d in one.deltas] == [0]
    (call,) = one.deltas[0].tool_calls
    assert call["id"] == "call_abc" and call["index"] == 0 and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert one.deltas[0].finish_reason == "tool_calls"

    two = merged_deltas(
        [
            ChoiceDelta(0, "Hel", logprobs=({"token": "Hel"},)),
            ChoiceDelta(1, "Bon"),
            ChoiceDelta(0, "lo", logprobs=({"token": "lo"},)),
            ChoiceDelta(1, "jour", finish_reason="stop"),
        ]
    )
    assert [(d.index, d.content, len(d.logprobs), d.finish_reason) for d in two] == [
        (0, "Hello", 2, None),
        (1, "Bonjour", 0, "stop"),
    ]


class _Body:
    """A response body given in the reads the test chooses (the relay's own rules, no network)."""

    def __init__(self, reads: list[bytes]):
        self.reads = reads

    async def aiter_bytes(self):
        for read in self.reads:
            yield read


async def test_a_line_longer_than_what_may_wait_unread_does_not_stall_the_stream(monkeypatch):
    monkeypatch.setattr(client_module._Relay, "MAX_UNREAD_BYTES", 100)
    body = _Body([b'data: {"text": "', b"x" * 300, b'"}\n\n', b"data: [DONE]\n\n"])
    relay = client_module._Relay(body)
    taken: list = []
    while DONE not in taken:  # as the answer's reader does: wait until something is ready, take it all
        await asyncio.wait_for(relay.ready.wait(), 5)
        relay.ready.clear()
        taken += relay.take()
    assert taken == [{"text": "x" * 300}, DONE]


async def test_the_total_deadline_holds_even_for_a_reader_that_never_waits(paced_worker):
    messages = [{"role": "user", "content": "Tell me a long story."}]
    timeouts = client_module.Timeouts(total=0.5)
    async with SGLangClient(paced_worker.url, timeouts=timeouts) as client:
        request = GenerationRequest(messages=messages, max_new_tokens=300, temperature=0)
        with pytest.raises(EngineTimeout) as timed_out:
            async for _ in client.generate_stream(request):
                await asyncio.sleep(0.2)  # slower than the engine: there is always something to read
    assert timed_out.value.phase == "total"


async def test_what_the_engine_sent_before_a_stop_still_reaches_the_reader(paced_worker):
    messages = [{"role": "user", "content": "Tell me a long story."}]
    async with SGLangClient(paced_worker.url) as client:
        whole = await client.generate(GenerationRequest(messages=messages, max_new_tokens=300, temperature=0))
        request = GenerationRequest(messages=messages, max_new_tokens=300, temperature=0)
        events = []
        async for event in client.generate_stream(request):
            events.append(event)
            if len(events) == 1:
                await asyncio.sleep(0.5)  # meanwhile tens of tokens arrive
                await client.cancel(request.rid)
    after_stop = "".join(e.text for e in events[1:])
    text = "".join(e.text for e in events)
    assert after_stop and whole.text.startswith(text)
    assert events[-1].finish_reason == "abort" and 1 < events[-1].usage.completion_tokens < 300

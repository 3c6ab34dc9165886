"""The client against the simulated worker: streamed text, finish reasons and usage, in both modes."""

from __future__ import annotations

import httpx
import pytest

from harness.engines import start_simulator
from inference.client import GenerationRequest, SGLangClient
from simulator import tokenizer as tok
from tests.inference.helpers import chat, collect, prompt_ids

QUESTION = chat("Tell me how the shared cache keeps a prefix warm between two turns.")


def request(**overrides) -> GenerationRequest:
    return GenerationRequest(**{"messages": QUESTION, "max_new_tokens": 400, "temperature": 0, **overrides})


@pytest.mark.parametrize("mode", ["native", "openai"])
@pytest.mark.parametrize(
    "sampling", [{"temperature": 0}, {"temperature": 0.9, "top_p": 0.95, "seed": 7}], ids=["greedy", "seeded"]
)
async def test_streamed_text_equals_non_streamed_text(worker, mode, sampling):
    async with SGLangClient(worker.url, mode=mode) as client:
        streamed = await collect(client, request(**sampling))
        whole = await client.generate(request(**sampling))
    assert streamed.text
    assert streamed.text == whole.text
    assert streamed.finish_reason == whole.finish_reason == "stop"  # the answer ended by itself (EOS)
    assert streamed.usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.parametrize("mode", ["native", "openai"])
async def test_events_carry_text_then_one_finish_with_the_final_usage(worker, mode):
    async with SGLangClient(worker.url, mode=mode) as client:
        events = (await collect(client, request(max_new_tokens=12))).events
    assert [e.finish_reason for e in events] == [""] * (len(events) - 1) + ["length"]
    assert all(e.text for e in events[:-1])  # no empty events before the end
    last = events[-1]
    assert last.finish is not None and last.finish.reason == "length"
    assert last.usage is not None and last.usage.completion_tokens == 12
    # The counts ride on every chunk (natively always; on the OpenAI routes because the client asks for
    # continuous_usage_stats): each event knows the prompt processed and the tokens produced so far.
    counts = [e.usage.completion_tokens for e in events]
    assert counts == sorted(counts) and counts[0] >= 1
    assert all(e.usage.prompt_tokens == last.usage.prompt_tokens for e in events)


async def test_native_and_openai_modes_give_the_same_answer_to_the_same_chat(worker):
    """Native mode renders ChatML itself; the OpenAI route renders it on the server: same bytes, same answer."""
    async with SGLangClient(worker.url) as native, SGLangClient(worker.url, mode="openai") as openai:
        a = await collect(native, request())
        b = await collect(openai, request())
    assert a.text == b.text
    assert a.usage.prompt_tokens == b.usage.prompt_tokens == len(prompt_ids(QUESTION))


@pytest.mark.parametrize("mode", ["native", "openai"])
async def test_usage_adds_up(worker, mode):
    async with SGLangClient(worker.url, mode=mode) as client:
        natural = await collect(client, request())
        cut = await collect(client, request(max_new_tokens=9))
    prompt = len(prompt_ids(QUESTION))
    # Stopped by the end-of-turn token: it counts as a completion token but is not in the text.
    assert natural.finish_reason == "stop"
    assert natural.usage.prompt_tokens == prompt
    assert natural.usage.completion_tokens == len(tok.encode(natural.text)) + 1
    assert natural.usage.total_tokens == prompt + natural.usage.completion_tokens
    # Cut by max_new_tokens: exactly that many tokens, all of them text.
    assert cut.finish_reason == "length"
    assert cut.usage.completion_tokens == 9 == len(tok.encode(cut.text))
    assert natural.text.startswith(cut.text)
    assert 0 <= cut.usage.cached_tokens < prompt


async def test_native_usage_matches_the_engines_own_output_ids(worker):
    body = {
        "text": "Write about the river and the harbor.",
        "sampling_params": {"max_new_tokens": 300, "temperature": 0},
    }
    raw = httpx.post(f"{worker.url}/generate", json=body, timeout=10).json()
    async with SGLangClient(worker.url) as client:
        result = await client.generate(GenerationRequest(prompt=body["text"], max_new_tokens=300, temperature=0))
    assert result.text == raw["text"]
    assert result.usage.completion_tokens == len(raw["output_ids"]) == raw["meta_info"]["completion_tokens"]
    assert result.usage.prompt_tokens == len(tok.encode(body["text"]))
    assert result.finish.raw == {"type": "stop", "matched": tok.ENDOFTEXT_ID}  # raw text: plain end-of-text


async def test_stop_string_ends_the_answer_before_the_string(worker):
    async with SGLangClient(worker.url) as client:
        full = await collect(client, request())
        stop = full.text.split()[3]  # a word the answer is sure to contain
        cut = await collect(client, request(stop=[stop]))
        whole = await client.generate(request(stop=[stop]))
    assert cut.finish_reason == "stop"
    finish = cut.events[-1].finish
    assert finish.matched == stop and finish.raw == {"type": "stop", "matched": stop}
    assert stop not in cut.text
    assert full.text.startswith(cut.text)
    assert full.text[len(cut.text) :].startswith(stop)
    assert whole.text == cut.text


async def test_sampling_without_a_seed_varies_and_with_a_seed_repeats(worker):
    async with SGLangClient(worker.url) as client:
        seeded = [await collect(client, request(temperature=1.0, seed=11)) for _ in range(2)]
        free = [await collect(client, request(temperature=1.0)) for _ in range(3)]
    assert seeded[0].text == seeded[1].text
    assert len({c.text for c in free}) > 1


async def test_incremental_streaming_output_is_read_as_deltas():
    """--incremental-streaming-output: chunks carry only new text; the client must not repeat it."""
    with start_simulator("--incremental-streaming-output") as incremental, start_simulator() as cumulative:
        async with SGLangClient(incremental.url) as a, SGLangClient(cumulative.url) as b:
            x = await collect(a, request())
            y = await collect(b, request())
        raw = httpx.post(
            f"{incremental.url}/generate",
            timeout=10,
            json={"text": "Hello", "stream": True, "sampling_params": {"max_new_tokens": 3, "temperature": 0}},
        ).text
    assert x.text == y.text
    assert x.usage == y.usage
    chunks = [line for line in raw.splitlines() if line.startswith("data: {")]
    assert len(chunks) == 3 and all('"output_ids":[' in c for c in chunks)
    assert raw.rstrip().endswith("data: [DONE]")


async def test_raw_prompt_in_openai_mode_uses_completions(worker):
    async with SGLangClient(worker.url, mode="openai") as openai, SGLangClient(worker.url) as native:
        a = await collect(openai, GenerationRequest(prompt="The market opens early", max_new_tokens=20, temperature=0))
        b = await collect(native, GenerationRequest(prompt="The market opens early", max_new_tokens=20, temperature=0))
    assert a.text == b.text and a.finish_reason == "length"


async def test_llama3_template_ends_on_its_own_end_token(worker):
    async with SGLangClient(worker.url, chat_template="llama3") as client:
        result = await client.generate(request())
    assert result.finish.raw == {"type": "stop", "matched": tok.EOT_ID}

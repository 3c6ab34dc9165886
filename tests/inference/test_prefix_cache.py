"""cached_tokens as the client sees it: true longest cached prefix, rounded as SGLang rounds it."""

from __future__ import annotations

import pytest

from harness.engines import start_simulator
from inference.client import GenerationRequest, SGLangClient
from simulator import tokenizer as tok
from tests.inference.helpers import chat, collect, common_prefix, expected_cached, flush_cache, prompt_ids

FIRST = chat("What does the gateway do with a new conversation?")
SECOND = chat("How does a worker count the tokens it already holds?")


def request(messages, **overrides) -> GenerationRequest:
    return GenerationRequest(**{"messages": messages, "max_new_tokens": 64, "temperature": 0, **overrides})


@pytest.mark.parametrize("mode", ["native", "openai"])
async def test_a_second_request_sharing_a_prefix_reports_it_cached(worker, mode):
    flush_cache(worker.url)
    async with SGLangClient(worker.url, mode=mode) as client:
        first = await collect(client, request(FIRST))
        second = await collect(client, request(SECOND))
    shared = common_prefix(prompt_ids(FIRST), prompt_ids(SECOND))
    assert shared > 30  # the system prompt and the template around it
    assert first.usage.cached_tokens == 0
    assert second.usage.cached_tokens == expected_cached(prompt_ids(FIRST), prompt_ids(SECOND)) == shared


async def test_the_same_prompt_again_is_cached_but_for_its_last_token(worker):
    flush_cache(worker.url)
    async with SGLangClient(worker.url) as client:
        await collect(client, request(FIRST))
        again = await collect(client, request(FIRST))
    assert again.usage.cached_tokens == len(prompt_ids(FIRST)) - 1 == again.usage.prompt_tokens - 1


async def test_the_next_turn_is_cached_through_the_previous_answer(worker):
    """SGLang inserts prompt + answer (less the last sampled token) when a request ends."""
    flush_cache(worker.url)
    async with SGLangClient(worker.url) as client:
        turn1 = await collect(client, request(FIRST, max_new_tokens=400))
        assert turn1.finish_reason == "stop"
        follow_up = [*FIRST, {"role": "assistant", "content": turn1.text}, {"role": "user", "content": "Why?"}]
        turn2 = await collect(client, request(follow_up))
    answered = prompt_ids(FIRST) + tok.encode(turn1.text)  # what the tree holds after turn 1
    assert turn2.usage.cached_tokens == expected_cached(answered, prompt_ids(follow_up)) == len(answered)


async def test_after_flush_cache_nothing_is_cached(worker):
    async with SGLangClient(worker.url) as client:
        await collect(client, request(FIRST))
        warm = await collect(client, request(FIRST))
        flush_cache(worker.url)
        cold = await collect(client, request(FIRST))
    assert warm.usage.cached_tokens > 0
    assert cold.usage.cached_tokens == 0


async def test_page_size_rounds_cached_tokens_down_to_whole_pages():
    with start_simulator("--page-size", "16") as paged:
        async with SGLangClient(paged.url) as client:
            await collect(client, request(FIRST))
            second = await collect(client, request(SECOND))
            again = await collect(client, request(FIRST))
    shared = common_prefix(prompt_ids(FIRST), prompt_ids(SECOND))
    assert shared % 16 != 0  # so the rounding is visible
    assert (
        second.usage.cached_tokens == shared - shared % 16 == expected_cached(prompt_ids(FIRST), prompt_ids(SECOND), 16)
    )
    n = len(prompt_ids(FIRST)) - 1
    assert again.usage.cached_tokens == n - n % 16


async def test_disabled_radix_cache_never_reports_cached_tokens():
    with start_simulator("--disable-radix-cache") as uncached:
        async with SGLangClient(uncached.url) as client:
            await collect(client, request(FIRST))
            again = await collect(client, request(FIRST))
    assert again.usage.cached_tokens == 0


async def test_an_evicted_prefix_is_not_reported_cached():
    """A KV pool of 400 tokens: filling it with other prompts evicts the first one (LRU leaves)."""
    with start_simulator("--max-total-tokens", "400", "--context-length", "400") as small:
        async with SGLangClient(small.url) as client:
            await collect(client, request(FIRST, max_new_tokens=8))
            for i in range(6):
                other = chat(
                    f"Question {i}: " + "tell me about the village market and its morning season " * 3,
                    system=f"Another system prompt, number {i}, unlike the first one.",
                )
                await collect(client, request(other, max_new_tokens=8))
            again = await collect(client, request(FIRST, max_new_tokens=8))
    assert again.usage.cached_tokens < len(prompt_ids(FIRST)) - 1


@pytest.mark.parametrize("policy", ["priority", "lru"])
async def test_a_paid_conversation_keeps_its_cache_through_a_free_burst_only_under_priority_eviction(policy):
    """--radix-eviction-policy priority with priority scheduling: under KV pressure the free tier's
    prefixes (priority 0, as the product sends for Free plans) go before a paid one's (10), so the
    paid conversation's next turn is still cached through its previous answer; under lru, the same
    burst evicts it (it is the least recently used)."""
    options = ("--max-total-tokens", "700", "--min-answer-tokens", "30", "--max-answer-tokens", "30")
    with start_simulator(*options, "--enable-priority-scheduling", "--radix-eviction-policy", policy) as small:
        async with SGLangClient(small.url) as client:
            turn1 = await collect(client, request(FIRST, priority=10))
            assert turn1.finish_reason == "stop"
            answered = prompt_ids(FIRST) + tok.encode(turn1.text)  # what the tree holds after turn 1
            burst = 0
            for i in range(12):  # several times the pool, one free conversation after another
                free = chat(f"Question {i} from the free tier: list some words that rhyme with number {i * 7}.")
                done = await collect(client, request(free, priority=0))
                burst += done.usage.prompt_tokens + len(tok.encode(done.text))
            assert burst > 2 * 700
            follow_up = [*FIRST, {"role": "assistant", "content": turn1.text}, {"role": "user", "content": "Why?"}]
            turn2 = await collect(client, request(follow_up, priority=10))
    if policy == "priority":
        assert turn2.usage.cached_tokens == expected_cached(answered, prompt_ids(follow_up)) == len(answered)
    else:
        # Only the system prompt the free conversations share with it is left.
        assert turn2.usage.cached_tokens < len(prompt_ids(FIRST))
        assert turn2.usage.cached_tokens == common_prefix(prompt_ids(FIRST), prompt_ids(chat("Question")))

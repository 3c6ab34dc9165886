"""The response cache, live, through the OpenAI SDK: a repeated deterministic request is answered from
the first answer (`x-cache: hit`), word for word and chunk for chunk when streamed, by no engine (the
ledger's row names no node and is billed by the plan's rule), and `Cache-Control: no-store` leaves it
out. The rules behind it are tests/chat/test_response_cache.py."""

import pytest

from billing.models import UsageRecord

pytestmark = pytest.mark.django_db(transaction=True)

ASK = {"model": "sim-small", "max_tokens": 24, "messages": [{"role": "user", "content": "Say something, please."}]}


def _ledger(key_id: int) -> list[UsageRecord]:
    return list(UsageRecord.objects.filter(api_key_id=key_id).order_by("created", "id"))


def test_a_repeated_request_is_answered_from_the_cache_word_for_word(client, pro_key):
    first = client.chat.completions.with_raw_response.create(**ASK, temperature=0)
    again = client.chat.completions.with_raw_response.create(**ASK, temperature=0)

    assert first.headers["x-cache"] == "miss" and again.headers["x-cache"] == "hit"
    assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert again.parse().usage.completion_tokens == first.parse().usage.completion_tokens
    engine_row, cache_row = _ledger(pro_key[0].pk)
    assert engine_row.node != "response-cache" and not engine_row.from_cache
    assert cache_row.node == "response-cache" and cache_row.from_cache
    assert cache_row.billable_tokens == 0  # Pro answers repeats free (cached_answer_percent 0)
    assert engine_row.billable_tokens > 0


def test_a_streamed_repeat_streams_as_an_answer_does(client):
    """The same chunk objects (content deltas, then the finish, then usage when asked): a program cannot
    tell a hit from an answer but by `x-cache`. How the text is cut into chunks depends on how fast the
    reader reads (a reader behind gets the text so far in one chunk), for a hit as for an engine."""

    def stream() -> tuple[str, str, list[str], object]:
        response = client.chat.completions.with_raw_response.create(
            **ASK, seed=11, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(response.parse())
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert chunks[0].choices[0].delta.role == "assistant"
        return response.headers["x-cache"], text, finishes, chunks[-1].usage

    first, replayed = stream(), stream()
    assert (first[0], replayed[0]) == ("miss", "hit")
    assert replayed[1:3] == first[1:3]  # the same text, and the same finish
    assert first[2] in (["length"], ["stop"])
    assert replayed[3].completion_tokens == first[3].completion_tokens


def test_no_store_neither_reads_nor_keeps_and_sampled_requests_are_never_cached(client, pro_key):
    private = client.chat.completions.with_raw_response.create(
        **ASK, temperature=0, extra_headers={"Cache-Control": "no-store"}
    )
    assert private.headers["x-cache"] == "bypass"
    assert client.chat.completions.with_raw_response.create(**ASK, temperature=0).headers["x-cache"] == "miss"
    sampled = client.chat.completions.with_raw_response.create(**ASK, temperature=0.8)
    assert sampled.headers["x-cache"] == "bypass"
    assert not any(row.from_cache for row in _ledger(pro_key[0].pk))

"""The official `openai` SDK, unchanged, against a live server with the simulated worker."""

import asyncio
import time

import httpx
import openai
import pytest

from accounts.api_keys import create_api_key, revoke_api_key
from billing.models import UsageRecord
from tests.chat.live import engine_running, wait_until
from tests.support.plans import put_on_plan

HELLO = [{"role": "user", "content": "Say hello to the test suite."}]


def ledger_row(completion_id: str) -> UsageRecord:
    return UsageRecord.objects.get(generation_id="api:" + completion_id.removeprefix("chatcmpl-"))


def test_a_non_streamed_completion_reports_the_usage_written_to_the_ledger(client, pro_key):
    completion = client.chat.completions.create(model="sim-small", messages=HELLO, max_tokens=40)

    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason in {"stop", "length"}
    row = ledger_row(completion.id)
    assert row.api_key_id == pro_key[0].pk and row.conversation_id is None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (
        row.prompt_tokens,
        row.completion_tokens,
    )
    assert completion.usage.prompt_tokens_details.cached_tokens == row.cached_tokens


def test_a_streamed_completion_with_the_async_client_adds_up(server, pro_key):
    async def scenario():
        async with openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=pro_key[1], max_retries=0) as aclient:
            stream = await aclient.chat.completions.create(
                model="sim-large",
                messages=HELLO,
                max_tokens=60,
                stream=True,
                stream_options={"include_usage": True},
            )
            return [chunk async for chunk in stream]

    chunks = asyncio.run(scenario())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert text and len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    row = ledger_row(chunks[0].id)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.prompt_tokens_details.cached_tokens) == (
        row.prompt_tokens,
        row.completion_tokens,
        row.cached_tokens,
    )


def test_a_shared_prefix_is_reported_as_cached(client):
    system = {"role": "system", "content": "You are a careful assistant. " * 20}
    client.chat.completions.create(model="sim-small", messages=[system, *HELLO], max_tokens=5)
    second = client.chat.completions.create(model="sim-small", messages=[system, *HELLO], max_tokens=5)
    assert second.usage.prompt_tokens_details.cached_tokens > 0


def test_models_lists_what_the_plan_allows(client, user, server):
    assert {m.id for m in client.models.list()} == {"sim-small", "sim-large"}
    # Each with the plan's context window on it: Pro allows 32,768 tokens, the models hold 8,192.
    assert {m.id: m.context_window for m in client.models.list()} == {"sim-small": 8192, "sim-large": 8192}
    assert client.models.retrieve("sim-large").context_window == 8192
    assert client.models.retrieve("sim-small").id == "sim-small"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_a_revoked_key_is_refused(server, pro_key, user):
    revoke_api_key(user, pro_key[0].pk)
    with (
        openai.OpenAI(base_url=server.base_url + "/v1", api_key=pro_key[1], max_retries=0) as client,
        pytest.raises(openai.AuthenticationError) as refused,
    ):
        client.chat.completions.create(model="sim-small", messages=HELLO)
    assert "revoked" in str(refused.value)


def test_an_unknown_key_is_refused(server, transactional_db):
    with (
        openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-sgl-nonsense", max_retries=0) as client,
        pytest.raises(openai.AuthenticationError),
    ):
        client.chat.completions.create(model="sim-small", messages=HELLO)


def test_a_free_plan_key_over_its_rate_is_told_when_to_come_back(server, transactional_db, other_user):
    # Given a Free plan on which staff have allowed API keys (the seeded Free plan has none).
    put_on_plan(other_user, "free", requests_per_minute=2, allows_api_keys=True)
    _, raw = create_api_key(other_user, "free tier")
    started = time.monotonic()
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=raw, max_retries=0) as client:
        for _ in range(2):
            client.chat.completions.create(model="sim-small", messages=HELLO, max_tokens=5)
        # At most 2 in any 60 seconds, whenever the test starts: the third is refused, and told to
        # come back when the first leaves the window.
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="sim-small", messages=HELLO, max_tokens=5)
    assert 60 - (time.monotonic() - started) <= int(refused.value.response.headers["Retry-After"]) <= 60
    assert "Free" in refused.value.message


def test_two_keys_of_one_user_share_the_plans_requests_a_minute(server, transactional_db, other_user):
    put_on_plan(other_user, "plus", requests_per_minute=3)
    raws = [create_api_key(other_user, name)[1] for name in ("laptop", "ci")]
    with (
        openai.OpenAI(base_url=server.base_url + "/v1", api_key=raws[0], max_retries=0) as first,
        openai.OpenAI(base_url=server.base_url + "/v1", api_key=raws[1], max_retries=0) as second,
    ):
        for client in (first, second, first):
            client.chat.completions.create(model="sim-small", messages=HELLO, max_tokens=5)
        # The plan's 3 a minute are the user's, not each key's: the second key is refused too.
        for client in (second, first):
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model="sim-small", messages=HELLO, max_tokens=5)
            assert "limit of 3 requests a minute of the Plus plan on the API, all your keys together" in (
                refused.value.message
            )
    assert UsageRecord.objects.filter(user=other_user).count() == 3


def test_a_model_outside_the_plan_is_refused(server, transactional_db, other_user):
    put_on_plan(other_user, "free", allows_api_keys=True)
    _, raw = create_api_key(other_user, "free tier")
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=raw, max_retries=0) as client:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            client.chat.completions.create(model="sim-large", messages=HELLO)
        assert "sim-large" in refused.value.message
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="gpt-9", messages=HELLO)


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "role"),
        ({"messages": HELLO, "temperature": 7}, "temperature"),
        ({"messages": HELLO, "max_tokens": 10_000_000}, "max_tokens"),
        ({"messages": HELLO, "n": 9}, "allows at most 4 choices per request"),
        ({"messages": HELLO, "functions": [{"name": "f"}]}, "send 'tools' instead"),
        ({"messages": HELLO, "tool_choice": "required"}, "Tools cannot be empty"),
        ({"messages": HELLO, "top_logprobs": 3}, "needs 'logprobs': true"),
    ],
)
def test_bad_requests_say_what_is_wrong(client, kwargs, says):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="sim-small", **kwargs)
    assert says in refused.value.message


def test_messages_that_cannot_fit_the_window_with_the_answer_are_refused_naming_both(client):
    # OpenAI's 400 context_length_exceeded (tests/api/test_errors_and_headers.py), not the web chat's 413.
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="sim-small", messages=[{"role": "user", "content": "x" * 200_000}])
    assert refused.value.status_code == 400
    assert "50,004 tokens" in refused.value.message and "8,192 tokens" in refused.value.message
    assert refused.value.body["param"] == "messages"
    assert not UsageRecord.objects.exists()


def test_a_malformed_body_is_a_400_not_a_500(server, pro_key):
    response = httpx.post(
        server.base_url + "/v1/chat/completions",
        content=b"{oops",
        headers={"Authorization": f"Bearer {pro_key[1]}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "not valid JSON" in response.json()["error"]["message"]


def test_a_client_that_leaves_mid_stream_aborts_the_engine_request_and_pays_for_what_it_got(client, engine):
    stream = client.chat.completions.create(
        model="sim-small",
        messages=[{"role": "user", "content": "Tell me a long story."}],
        max_tokens=900,
        stream=True,
    )
    received = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += 1
            if received == 3:
                break
    completion_id = chunk.id
    stream.close()

    wait_until(lambda: engine_running(engine.url) == 0, what="the engine to drop the abandoned request")
    row = wait_until(
        lambda: UsageRecord.objects.filter(generation_id="api:" + completion_id.removeprefix("chatcmpl-")).first(),
        what="the ledger row",
    )
    assert 0 < row.completion_tokens < 900

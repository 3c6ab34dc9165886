"""A `/v1` call the program abandons (an SDK timeout, Ctrl-C) is settled like any other ending: what
the engine wrote is billed, and its quota hold and answers-at-once place are given back at once, not
after the reservation's half-hour lifetime."""

import httpx
import openai
import pytest

from accounts.api_keys import create_api_key
from billing.models import UsageRecord
from harness.engines import start_simulator
from tests.chat.live import wait_until
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

LONG = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper and the sea."}]


@pytest.fixture(scope="module")
def long_server(django_db_setup, django_db_blocker):
    """Answers of 600 tokens at about 60 a second: ten seconds each, time enough to walk away."""
    engine = start_simulator(
        "--accept-any-model", "--min-answer-tokens", "600", "--max-answer-tokens", "600", speed="slow"
    )
    server = start_daphne(engine_url=engine.url)
    yield server
    server.stop()
    engine.stop()


def _abandon(base_url: str, key: str, *, stream: bool) -> None:
    """Start a long completion and leave before it ends, as a program whose timeout fires does (a
    streamed one is left after its first chunks, as a reader that breaks out of the loop)."""
    body = {"model": "sim-small", "messages": LONG, "max_tokens": 1000, "stream": stream}
    headers = {"Authorization": f"Bearer {key}"}
    try:
        with (
            httpx.Client(base_url=base_url, timeout=httpx.Timeout(60, read=1.5)) as http,
            http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response,
        ):
            assert response.status_code == 200, response.read()
            for count, _ in enumerate(response.iter_lines()):
                if stream and count >= 8:
                    return
    except httpx.ReadTimeout:
        return
    raise AssertionError("the completion ended before the client gave up on it; make it longer")


def test_abandoned_completions_are_billed_and_give_back_their_places(transactional_db, long_server, user):
    plan = put_on_plan(user, "plus")
    key, raw = create_api_key(user, "abandoned")
    # As many abandoned calls as the plan's answers at once, non-streamed (and one streamed).
    for index in range(plan.answers_at_once):
        _abandon(long_server.base_url, raw, stream=index == 0)

    rows = wait_until(
        lambda: (
            list(UsageRecord.objects.filter(api_key_id=key.pk))
            if UsageRecord.objects.filter(api_key_id=key.pk).count() == plan.answers_at_once
            else None
        ),
        timeout=30,
        what="every abandoned completion to be settled",
    )
    # What the engine wrote before it was aborted is billed, with the engine's own counts.
    assert all(row.completion_tokens > 0 and row.prompt_tokens > 0 for row in rows), [
        (row.prompt_tokens, row.completion_tokens) for row in rows
    ]

    # Their places are free: the next call is answered, not refused as one answer too many.
    with openai.OpenAI(base_url=long_server.base_url + "/v1", api_key=raw, max_retries=0, timeout=60) as client:
        reply = client.chat.completions.create(
            model="sim-small", messages=[{"role": "user", "content": "Hello again."}], max_tokens=5
        )
    assert reply.choices[0].message.content

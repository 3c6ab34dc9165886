"""/metrics: the product's figures for Prometheus, for staff or a scraper with the token, never public."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from accounts.api_keys import create_api_key
from tests.conftest import make_user
from tests.support.live_fixtures import METRICS_TOKEN
from tests.support.plans import put_on_plan

TOKEN = "scrape-me-please"


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus's text format (0 when it is not there yet)."""
    wanted = ",".join(sorted(f'{key}="{value}"' for key, value in labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{re.escape(name)}\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match.group(1).split(","))) == wanted:
            return float(match.group(2))
    return 0.0


@pytest.fixture
def metrics_token(settings):
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


@pytest.mark.django_db
def test_metrics_are_refused_to_anonymous_callers_and_to_users_who_are_not_staff(client, metrics_token):
    anonymous = client.get("/metrics")
    assert anonymous.status_code == 401 and "METRICS_TOKEN" in anonymous.json()["error"]["message"]
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    client.force_login(make_user("someone@example.com"))
    assert client.get("/metrics").status_code == 403


@pytest.mark.django_db
def test_a_scraper_with_the_token_reads_the_text_format(client, metrics_token):
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert "# TYPE sglchat_answers_total counter" in response.content.decode()


def test_answers_and_responses_are_counted_on_a_live_server(server, transactional_db):
    """An API answer through a real Daphne moves the answer, token, time-to-first-token and response counters."""
    user = make_user("counted@example.com")
    put_on_plan(user, "pro")
    _, raw = create_api_key(user, "metrics")
    scrape = {"Authorization": f"Bearer {METRICS_TOKEN}"}

    def read() -> str:
        response = httpx.get(server.base_url + "/metrics", headers=scrape, timeout=10)
        assert response.status_code == 200, response.text
        return response.text

    before = read()
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=raw, max_retries=0, timeout=60) as sdk:
        answer = sdk.chat.completions.create(
            model="sim-small", max_tokens=16, messages=[{"role": "user", "content": "Count this, please."}]
        )
    after = read()
    assert answer.choices[0].message.content
    assert (
        sample(after, "sglchat_answers_total", source="api", status="completed")
        == sample(before, "sglchat_answers_total", source="api", status="completed") + 1
    )
    assert (
        sample(after, "sglchat_tokens_total", source="api", kind="completion")
        == sample(before, "sglchat_tokens_total", source="api", kind="completion") + answer.usage.completion_tokens
    )
    assert sample(after, "sglchat_http_responses_total", status="200") > sample(
        before, "sglchat_http_responses_total", status="200"
    )
    assert (
        sample(after, "sglchat_time_to_first_token_seconds_count", source="api")
        == sample(before, "sglchat_time_to_first_token_seconds_count", source="api") + 1
    )

"""The `/v1` API's errors and headers as OpenAI sends them (issue 20): an unknown path or method is
OpenAI's JSON error, an over-long prompt is 400 `context_length_exceeded`, every response carries
`x-request-id` and the plan's real rate-limit windows, and CORS answers browsers when it is configured.

The unmodified `openai` SDK against the live server (Daphne) where the point is what the SDK sees."""

import json
import logging
import re

import httpx
import openai
import pytest

from accounts.api_keys import create_api_key
from billing.models import UsageRecord
from tests.support.plans import put_on_plan

HELLO = [{"role": "user", "content": "Say hello to the test suite."}]
REQUEST_ID = re.compile(r"^req_[0-9a-f]{32}$")
#: OpenAI's duration format, as its SDKs and LiteLLM read it: "1s", "6m0s", "719h59m59s", "250ms".
DURATION = re.compile(r"^(\d+h)?(\d+m)?(\d+s|\d+ms)$")


def seconds(duration: str) -> float:
    hours, minutes, rest = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(\d+(?:ms|s))", duration).groups()
    whole = int(rest[:-2]) / 1000 if rest.endswith("ms") else int(rest[:-1])
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + whole


# --- Unknown paths and methods ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["nope", "files", "chat/completion", "models/"])
def test_an_unknown_v1_path_is_openais_json_404_and_the_sdk_raises_not_found(client, path):
    with pytest.raises(openai.NotFoundError) as refused:
        client.post(path, body={"model": "sim-small"}, cast_to=httpx.Response)
    body = refused.value.body
    assert body["type"] == "invalid_request_error" and body["code"] == "not_found" and body["param"] is None
    assert f"Invalid URL (POST /v1/{path})" in body["message"]
    assert refused.value.response.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("path", ["/v1/files", "/v1"])
def test_an_unknown_v1_path_without_a_key_is_the_same_json_404(server, transactional_db, path):
    response = httpx.get(server.base_url + path)
    assert response.status_code == 404
    assert response.json()["error"]["message"].startswith(f"Invalid URL (GET {path})")


def test_a_wrong_method_on_a_known_path_is_a_json_405_naming_the_method_to_use(server, pro_key):
    auth = {"Authorization": f"Bearer {pro_key[1]}"}
    for method, path, allowed in (("GET", "/v1/chat/completions", "POST"), ("POST", "/v1/models", "GET")):
        response = httpx.request(method, server.base_url + path, headers=auth)
        assert response.status_code == 405, (method, path, response.text)
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "method_not_allowed"
        assert f"({method} {path})" in error["message"] and allowed in error["message"]
        assert allowed in response.headers["Allow"]


# --- The context window -------------------------------------------------------------------------------


def test_a_prompt_over_the_context_window_is_openais_400_context_length_exceeded(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="sim-small", messages=[{"role": "user", "content": "x" * 200_000}])
    error = refused.value
    assert error.status_code == 400 and error.code == "context_length_exceeded" and error.param == "messages"
    assert error.type == "invalid_request_error"
    # OpenAI's sentence, which LangChain and LiteLLM recognise, with the Pro plan's window on the model...
    assert "This model's maximum context length is 8192 tokens" in error.message
    # ...and the product's own advice.
    assert "50,004 tokens" in error.message and "max_tokens" in error.message
    assert not UsageRecord.objects.exists()


# --- x-request-id -------------------------------------------------------------------------------------


def test_every_v1_response_carries_a_fresh_request_id(client, server, pro_key):
    completion = client.chat.completions.with_raw_response.create(model="sim-small", messages=HELLO, max_tokens=5)
    assert REQUEST_ID.match(completion.request_id)
    assert REQUEST_ID.match(completion.parse()._request_id)

    with client.chat.completions.with_streaming_response.create(
        model="sim-small", messages=HELLO, max_tokens=5, stream=True
    ) as stream:
        streamed = stream.request_id
        assert [line for line in stream.iter_lines() if line][-1] == "data: [DONE]"
    assert REQUEST_ID.match(streamed)

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="sim-small", messages=[])
    refusal = refused.value.request_id
    unauthenticated = httpx.get(server.base_url + "/v1/models").headers["x-request-id"]
    listed = client.models.with_raw_response.list().request_id

    ids = [completion.request_id, streamed, refusal, unauthenticated, listed]
    assert all(REQUEST_ID.match(i) for i in ids) and len(set(ids)) == len(ids)


def test_a_callers_own_request_id_is_echoed_apart_from_ours(server, pro_key):
    response = httpx.get(
        server.base_url + "/v1/models",
        headers={"Authorization": f"Bearer {pro_key[1]}", "X-Client-Request-Id": "trace-42"},
    )
    assert response.headers["x-client-request-id"] == "trace-42"
    assert REQUEST_ID.match(response.headers["x-request-id"]) and response.headers["x-request-id"] != "trace-42"
    # A header that is not plain ASCII text is not echoed (it would go into logs and other systems).
    odd = httpx.get(server.base_url + "/v1/models", headers={"X-Request-Id": "a b\tc"})
    assert "x-client-request-id" not in odd.headers


def test_the_request_id_is_logged_with_the_request(pro_key, caplog):
    from django.test import Client

    with caplog.at_level(logging.INFO, logger="api.requests"):
        response = Client().get(
            "/v1/models", HTTP_AUTHORIZATION=f"Bearer {pro_key[1]}", HTTP_X_CLIENT_REQUEST_ID="trace-7"
        )
    [record] = [r for r in caplog.records if r.name == "api.requests"]
    assert record.request_id == response["x-request-id"] and record.client_request_id == "trace-7"
    assert record.status == 200 and record.path == "/v1/models" and record.method == "GET"
    assert record.user_id == pro_key[0].user_id


# --- Rate-limit headers -------------------------------------------------------------------------------


def test_headers_that_cannot_be_read_now_are_left_out_and_never_fail_the_answer(pro_key, monkeypatch):
    """The answer has been given (a completion may already be running and billed) when the headers are
    read: a database with no connection to spare then, or a Redis that went away, costs the headers,
    never the answer (under load it turned answered, billed requests into 503s)."""
    from django.db import OperationalError
    from django.test import Client

    from billing import services

    def pool_exhausted(**_):
        raise OperationalError("couldn't get a connection after 2.00 sec")

    monkeypatch.setattr(services, "request_window", pool_exhausted)
    response = Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {pro_key[1]}")
    assert response.status_code == 200 and response.json()["data"]
    assert response["x-request-id"].startswith("req_")
    assert not ratelimit(response.headers)


def ratelimit(headers) -> dict[str, str]:
    return {
        name.removeprefix("x-ratelimit-"): value for name, value in headers.items() if name.startswith("x-ratelimit-")
    }


def test_the_rate_limit_headers_count_down_with_each_request_and_a_429_shows_none_left(
    server, transactional_db, other_user
):
    plan = put_on_plan(other_user, "plus", requests_per_minute=3)  # a 30-day period from now
    _, raw = create_api_key(other_user, "three a minute")
    seen = []
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=raw, max_retries=0) as client:
        before = ratelimit(client.models.with_raw_response.list().headers)  # reading counts nothing
        for _ in range(3):
            seen.append(
                ratelimit(
                    client.chat.completions.with_raw_response.create(
                        model="sim-small", messages=HELLO, max_tokens=5
                    ).headers
                )
            )
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="sim-small", messages=HELLO, max_tokens=5)
    assert before["limit-requests"] == "3" and before["remaining-requests"] == "3"
    assert before["reset-requests"] == "0s"
    assert [h["remaining-requests"] for h in seen] == ["2", "1", "0"]
    assert all(h["limit-requests"] == "3" and DURATION.match(h["reset-requests"]) for h in seen)
    assert 0 < seconds(seen[0]["reset-requests"]) <= 60

    # Tokens: the plan's period quota, less what the ledger has billed (nothing is still held).
    billed = 0
    for headers, row in zip(seen, UsageRecord.objects.filter(user=other_user).order_by("created"), strict=True):
        billed += row.billable_tokens
        assert headers["limit-tokens"] == str(plan.tokens_per_month)
        assert int(headers["remaining-tokens"]) == plan.tokens_per_month - billed
        assert DURATION.match(headers["reset-tokens"]) and 29 * 86400 < seconds(headers["reset-tokens"]) <= 30 * 86400

    limited = ratelimit(refused.value.response.headers)
    assert limited["limit-requests"] == "3" and limited["remaining-requests"] == "0"
    retry_after = int(refused.value.response.headers["Retry-After"])
    assert 0 < seconds(limited["reset-requests"]) <= retry_after <= 60


def test_a_streamed_completion_carries_the_rate_limit_headers(client):
    with client.chat.completions.with_streaming_response.create(
        model="sim-small", messages=HELLO, max_tokens=5, stream=True
    ) as stream:
        headers = ratelimit(stream.headers)
        list(stream.iter_lines())
    assert headers["limit-requests"] == "240" and headers["remaining-requests"] == "239"
    assert int(headers["remaining-tokens"]) < int(headers["limit-tokens"])  # the answer's hold is counted


# --- CORS ---------------------------------------------------------------------------------------------

PREFLIGHT = {
    "HTTP_ORIGIN": "https://app.example.com",
    "HTTP_ACCESS_CONTROL_REQUEST_METHOD": "POST",
    "HTTP_ACCESS_CONTROL_REQUEST_HEADERS": "authorization, content-type, x-stainless-os",
}


def test_cors_is_off_by_default(db, settings):
    from django.test import Client

    assert settings.API_CORS_ORIGINS == []
    response = Client().options("/v1/chat/completions", **PREFLIGHT)
    assert "Access-Control-Allow-Origin" not in response
    assert "Access-Control-Allow-Origin" not in Client().get("/v1/models", HTTP_ORIGIN="https://app.example.com")


def test_any_origin_gets_a_preflight_answer_and_readable_headers_never_credentials(db, settings):
    from django.test import Client

    settings.API_CORS_ORIGINS = ["*"]
    preflight = Client().options("/v1/chat/completions", **PREFLIGHT)
    assert preflight.status_code == 204
    assert preflight["Access-Control-Allow-Origin"] == "*"
    assert {"POST", "GET", "OPTIONS"} <= {m.strip() for m in preflight["Access-Control-Allow-Methods"].split(",")}
    allowed = {h.strip().lower() for h in preflight["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type", "x-stainless-os", "x-stainless-retry-count"} <= allowed
    assert {"openai-organization", "openai-project"} <= allowed
    assert int(preflight["Access-Control-Max-Age"]) > 0
    assert "Access-Control-Allow-Credentials" not in preflight

    answer = Client().get("/v1/models", HTTP_ORIGIN="https://app.example.com")
    assert answer.status_code == 401 and answer["Access-Control-Allow-Origin"] == "*"
    exposed = {h.strip().lower() for h in answer["Access-Control-Expose-Headers"].split(",")}
    assert {"x-request-id", "x-ratelimit-remaining-requests", "x-ratelimit-reset-tokens", "retry-after"} <= exposed
    assert "Access-Control-Allow-Credentials" not in answer


def test_a_list_of_origins_allows_only_those_and_only_on_v1(db, settings):
    from django.test import Client

    settings.API_CORS_ORIGINS = ["https://app.example.com", "http://localhost:3000"]
    allowed = Client().options("/v1/chat/completions", **PREFLIGHT)
    assert allowed.status_code == 204 and allowed["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert "Origin" in allowed["Vary"]

    other = Client().options("/v1/chat/completions", **{**PREFLIGHT, "HTTP_ORIGIN": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in other
    assert "Access-Control-Allow-Origin" not in Client().get("/v1/models", HTTP_ORIGIN="https://evil.example")
    # Only the API: the site's own pages and endpoints never answer another origin.
    assert "Access-Control-Allow-Origin" not in Client().get("/healthz", HTTP_ORIGIN="https://app.example.com")
    assert "Access-Control-Allow-Origin" not in Client().options("/chat/api/send", **PREFLIGHT)


def test_the_live_server_started_without_the_variable_answers_no_preflight(server, pro_key):
    response = httpx.options(
        server.base_url + "/v1/chat/completions",
        headers={"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in response.headers
    assert json.loads(response.text)["error"]["code"] == "method_not_allowed"

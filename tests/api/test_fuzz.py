"""No request body, however strange, makes the API answer 500."""

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.api_keys import create_api_key
from tests.support.json_fuzz import json_scalars, json_values, raw_bodies
from tests.support.plans import put_on_plan

messages = (
    st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "system", "assistant", "developer", "tool", ""]) | json_values,
                "content": st.text(max_size=50) | json_values,
            },
        ),
        max_size=4,
    )
    | json_values
)
bodies = (
    st.fixed_dictionaries(
        {},
        optional={
            "model": st.sampled_from(["sim-small", "sim-large", "nope"]) | json_scalars,
            "messages": messages,
            "max_tokens": st.integers(-5, 12) | json_scalars,
            "max_completion_tokens": st.integers(-5, 12) | json_scalars,
            "temperature": st.floats(-1, 3) | json_scalars,
            "top_p": st.floats(-1, 2) | json_scalars,
            "stop": st.lists(st.text(max_size=5), max_size=6) | json_scalars,
            "stream": st.booleans() | json_scalars,
            "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | json_scalars,
            "n": st.integers(0, 3) | json_scalars,
            "seed": st.integers(-3, 2**40) | json_scalars,
            "user": json_scalars,
            "frequency_penalty": json_scalars,
            "surprise": json_values,
        },
    )
    | json_values
)


@pytest.fixture
def api(transactional_db, server, user):
    put_on_plan(user, "pro", requests_per_minute=100_000, tokens_per_month=10**12)
    _, raw = create_api_key(user, "fuzz")
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {raw}"}, timeout=60) as http:
        yield http


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_no_request_body_causes_a_server_error(api, body):
    with api.stream("POST", "/v1/chat/completions", json=body) as response:
        payload = response.read()
    assert response.status_code < 500 or response.status_code in {502, 503, 504}, payload
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["message"] and error["type"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=raw_bodies(bodies), with_key=st.booleans())
def test_no_raw_body_causes_a_server_error(api, body, with_key):
    """Bodies that are not JSON, not UTF-8 or nested thousands deep: a 4xx in OpenAI's shape, with the
    key (400) and without it (401: the key is checked before the body is read)."""
    headers = {"Content-Type": "application/json"}
    if not with_key:
        headers["Authorization"] = ""
    response = api.post("/v1/chat/completions", content=body, headers=headers)
    if not with_key:
        assert response.status_code == 401, response.text[:300]
    assert response.status_code < 500 or response.status_code in {502, 503, 504}, response.text[:300]
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["message"] and error["type"]

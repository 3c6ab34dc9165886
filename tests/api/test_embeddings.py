"""`POST /v1/embeddings` on a live server with a simulated embedding worker (`--is-embedding`) beside
the chat one: the official `openai` SDK, the plan's rules, the ledger and the errors."""

from __future__ import annotations

import math

import httpx
import openai
import pytest

from accounts.api_keys import create_api_key
from billing.models import UsageRecord
from simulator import tokenizer as tok
from simulator.embedding import embed_text
from tests.api.conftest import EMBED, WINDOW
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne


@pytest.fixture
def key(transactional_db, embed_server, user):
    put_on_plan(user, "pro")
    return create_api_key(user, "tests")


@pytest.fixture
def sdk(embed_server, key):
    with openai.OpenAI(base_url=embed_server.base_url + "/v1", api_key=key[1], max_retries=0, timeout=60) as client:
        yield client


def post(server, raw_key: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/embeddings", json=body, headers={"Authorization": f"Bearer {raw_key}"}, timeout=30
    )


def same_vector(got, text: str) -> bool:
    """The engine's vector for `text`, to float32 precision (the product reads the engine's base64)."""
    want = embed_text(text, 384)
    return len(got) == len(want) and all(
        math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for a, b in zip(got, want, strict=True)
    )


def cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_the_sdk_gets_the_engines_vectors_and_the_usage_is_the_ledger_row(sdk, key):
    texts = ["The prefix cache reuses tokens.", "How are cached tokens reused?", "Penguins swim in cold seas."]
    # The SDK asks for base64 by default and decodes it: the vectors must come back exact.
    reply = sdk.embeddings.create(model=EMBED, input=texts)
    assert reply.model == EMBED and reply.object == "list"
    assert [d.index for d in reply.data] == [0, 1, 2]
    assert all(same_vector(item.embedding, text) for item, text in zip(reply.data, texts, strict=True))
    first, second, third = (d.embedding for d in reply.data)
    assert cosine(first, second) > cosine(first, third)
    tokens = sum(len(tok.encode(t)) for t in texts)
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == tokens
    row = UsageRecord.objects.get(model=EMBED)
    assert (row.prompt_tokens, row.cached_tokens, row.completion_tokens) == (tokens, 0, 0)
    assert row.billable_tokens == tokens  # BILLING_EMBEDDING_TOKEN_DISCOUNT_PERCENT is 0 by default
    assert row.api_key_id == key[0].pk and row.node == "default-embedding"


def test_floats_token_ids_and_one_string_are_accepted(embed_server, key):
    ids = tok.encode("paged attention")
    floats = post(embed_server, key[1], {"model": EMBED, "input": ids, "encoding_format": "float"})
    assert floats.status_code == 200, floats.text
    body = floats.json()
    assert same_vector(body["data"][0]["embedding"], "paged attention")
    assert body["usage"] == {"prompt_tokens": len(ids), "total_tokens": len(ids)}
    many = post(embed_server, key[1], {"model": EMBED, "input": [ids, ids]}).json()
    assert len(many["data"]) == 2
    single = post(embed_server, key[1], {"model": EMBED, "input": "paged attention"}).json()
    assert single["data"][0]["embedding"] == body["data"][0]["embedding"]


def test_models_lists_the_embedding_model_and_chat_refuses_it(sdk):
    assert {m.id: m.context_window for m in sdk.models.list()} == {"sim-small": 8192, "sim-large": 8192, EMBED: WINDOW}
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model=EMBED, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["param"] == "model"
    assert "is an embedding model; use /v1/embeddings" in refused.value.body["message"]
    with pytest.raises(openai.BadRequestError) as other_way:
        sdk.embeddings.create(model="sim-small", input="hi")
    assert other_way.value.body["param"] == "model"
    assert "is a chat model; use /v1/chat/completions" in other_way.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        sdk.embeddings.create(model="no-such-model", input="hi")


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": EMBED, "input": ""}, "input", "bad_request"),
        ({"model": EMBED, "input": []}, "input", "bad_request"),
        ({"model": EMBED, "input": ["a"] * 2049}, "input", "bad_request"),
        ({"model": EMBED, "input": ["a", [1, 2]]}, "input", "bad_request"),
        ({"model": EMBED, "input": "a", "encoding_format": "int8"}, "encoding_format", "bad_request"),
        ({"model": EMBED, "input": "a", "dimensions": 0}, "dimensions", "bad_request"),
        ({"model": EMBED, "input": "a", "dimensions": 64}, "dimensions", "bad_request"),
        ({"model": EMBED, "input": "a", "temperature": 1}, "temperature", "bad_request"),
        ({"input": "a"}, "model", "bad_request"),
        ({"model": EMBED, "input": list(range(20, 20 + WINDOW + 1))}, "input", "context_length_exceeded"),
        ({"model": EMBED, "input": ["short", "word " * (WINDOW + 10)]}, "input", "context_length_exceeded"),
    ],
)
def test_bad_requests_are_openai_400s_naming_the_parameter(embed_server, key, body, param, code):
    reply = post(embed_server, key[1], body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")
    assert not UsageRecord.objects.filter(model=EMBED).exists()


def test_2048_inputs_is_the_cap_and_passes(embed_server, key):
    reply = post(embed_server, key[1], {"model": EMBED, "input": ["a b"] * 2048})
    assert reply.status_code == 200 and len(reply.json()["data"]) == 2048


def test_a_plan_without_the_model_is_refused(embed_server, user, transactional_db):
    put_on_plan(user, "pro", all_models=False, model_ids=["sim-small"])
    _, raw = create_api_key(user, "tests")
    reply = post(embed_server, raw, {"model": EMBED, "input": "hi"})
    assert reply.status_code == 403 and reply.json()["error"]["type"] == "permission_error"


def test_the_quota_counts_embedding_tokens(embed_server, user, transactional_db):
    put_on_plan(user, "pro", tokens_per_month=10)
    _, raw = create_api_key(user, "tests")
    reply = post(embed_server, raw, {"model": EMBED, "input": "one two three four five six seven eight nine ten"})
    assert reply.status_code == 429 and reply.json()["error"]["type"] == "insufficient_quota"


def test_the_plans_request_window_applies(embed_server, user, transactional_db):
    put_on_plan(user, "pro", requests_per_minute=2)
    _, raw = create_api_key(user, "tests")
    statuses = [post(embed_server, raw, {"model": EMBED, "input": "hi"}).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_no_node_serving_the_model_is_a_503_with_retry_after(engine, user, transactional_db, django_db_blocker):
    server = start_daphne(
        engine_url=engine.url, extra_env={"INFERENCE_EMBEDDING_MODELS": f"{EMBED}=Simulated Embeddings"}
    )
    try:
        put_on_plan(user, "pro")
        _, raw = create_api_key(user, "tests")
        reply = post(server, raw, {"model": EMBED, "input": "hi"})
        assert reply.status_code == 503 and int(reply.headers["Retry-After"]) > 0
        assert reply.json()["error"]["type"] == "server_error"
    finally:
        server.stop()

"""Embedding models in the catalogue, their price, and the client's `embed` against a simulated worker."""

from __future__ import annotations

import asyncio
import math

import pytest

from billing.pricing import billable_embedding_tokens
from harness.engines import start_simulator
from inference import catalogue
from inference.client import SGLangClient
from inference.errors import EngineBadRequest, EngineUnavailable
from simulator import tokenizer as tok
from simulator.embedding import NOT_EMBEDDING, embed_text


@pytest.fixture(autouse=True)
def _models(settings):
    settings.INFERENCE_MODELS = ["sim-small=Simulated Small"]
    settings.INFERENCE_EMBEDDING_MODELS = ["sim-embed=Simulated Embeddings"]
    settings.INFERENCE_MODEL_CONTEXT_TOKENS = {"sim-embed": 512}


def test_each_model_has_one_kind_and_chat_lookups_refuse_embedding_models():
    assert [(m.id, m.kind) for m in catalogue.available_models()] == [("sim-small", "chat")]
    (embed,) = catalogue.embedding_models()
    assert (embed.id, embed.name, embed.kind, embed.context_tokens) == (
        "sim-embed",
        "Simulated Embeddings",
        "embedding",
        512,
    )
    with pytest.raises(catalogue.WrongKind) as chat_refusal:
        catalogue.get_model("sim-embed")
    assert chat_refusal.value.status == 400 and chat_refusal.value.details["param"] == "model"
    assert "is an embedding model; use /v1/embeddings" in chat_refusal.value.message
    with pytest.raises(catalogue.WrongKind, match="is a chat model; use /v1/chat/completions"):
        catalogue.get_embedding_model("sim-small")
    assert catalogue.get_model("nothing") is None and catalogue.get_embedding_model("nothing") is None


@pytest.mark.parametrize(("discount", "tokens", "billable"), [(0, 7, 7), (50, 7, 4), (90, 11, 2), (100, 9, 0)])
def test_embedding_tokens_are_priced_with_the_discount_rounded_up(settings, discount, tokens, billable):
    settings.BILLING_EMBEDDING_TOKEN_DISCOUNT_PERCENT = discount
    assert billable_embedding_tokens(tokens) == billable


@pytest.fixture(scope="module")
def embedder():
    with start_simulator("--is-embedding", "--served-model-name", "sim-embed") as w:
        yield w


def test_the_clients_embed_decodes_the_engines_base64(embedder):
    async def scenario():
        async with SGLangClient(embedder.url) as client:
            return await client.embed(["alpha beta", "gamma"], model="sim-embed")

    result = asyncio.run(scenario())
    assert result.prompt_tokens == len(tok.encode("alpha beta")) + len(tok.encode("gamma"))
    assert result.model.endswith("model")  # SGLang answers its model path
    for got, text in zip(result.vectors, ["alpha beta", "gamma"], strict=True):
        assert all(
            math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for a, b in zip(got, embed_text(text, 384), strict=True)
        )


def test_the_clients_embed_maps_errors(worker):
    async def on(url):
        async with SGLangClient(url) as client:
            return await client.embed(["x"])

    with pytest.raises(EngineBadRequest) as refused:
        asyncio.run(on(worker.url))  # a generation server
    assert NOT_EMBEDDING in refused.value.detail and not refused.value.node_at_fault
    with pytest.raises(EngineUnavailable):
        asyncio.run(on("http://127.0.0.1:9"))

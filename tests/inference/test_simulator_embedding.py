"""The simulated embedding server (`--is-embedding`) speaks SGLang's /v1/embeddings and /encode
(sglang-protocol.md §10.6), and its vectors carry lexical similarity; checked on the wire."""

from __future__ import annotations

import base64
import json
import math
import struct
import subprocess
import sys

import httpx
import pytest

from harness.engines import start_simulator
from simulator import tokenizer as tok
from simulator.embedding import NOT_EMBEDDING, NOT_GENERATION, embed_text

MODEL_NAME = "sim-embed"


@pytest.fixture(scope="module")
def embedder():
    with start_simulator(
        "--is-embedding",
        "--served-model-name",
        MODEL_NAME,
        "--context-length",
        "64",
        "--max-total-tokens",
        "4096",
    ) as w:
        yield w


@pytest.fixture(scope="module")
def matryoshka():
    with start_simulator("--is-embedding", "--embedding-dim", "256", "--matryoshka-dimensions", "64,128") as w:
        yield w


@pytest.fixture(scope="module")
def generator():
    with start_simulator() as w:
        yield w


def post(worker, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{worker.url}{path}", json=body, timeout=10)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def vectors(worker, texts: list[str]) -> list[list[float]]:
    reply = post(worker, "/v1/embeddings", {"model": MODEL_NAME, "input": texts})
    assert reply.status_code == 200, reply.text
    return [item["embedding"] for item in reply.json()["data"]]


def test_the_response_has_sglangs_shape_with_the_model_path_and_the_tokenizers_count(embedder):
    info = httpx.get(f"{embedder.url}/get_model_info").json()
    text = "The radix cache keeps prefixes."
    reply = post(embedder, "/v1/embeddings", {"model": "whatever-asked", "input": text})
    assert reply.status_code == 200
    body = reply.json()
    assert body["object"] == "list"
    assert body["model"] == info["model_path"] != "whatever-asked"
    (item,) = body["data"]
    assert item["object"] == "embedding" and item["index"] == 0
    assert len(item["embedding"]) == 384
    assert math.isclose(math.sqrt(sum(x * x for x in item["embedding"])), 1.0, rel_tol=1e-9)
    n = len(tok.encode(text))
    assert body["usage"] == {
        "prompt_tokens": n,
        "total_tokens": n,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


def test_every_input_form_is_accepted_and_ids_embed_like_their_text(embedder):
    text, other = "paged attention kernels", "speculative decoding"
    ids, other_ids = tok.encode(text), tok.encode(other)
    by_text = vectors(embedder, [text, other])
    one_ids = post(embedder, "/v1/embeddings", {"input": ids}).json()
    many_ids = post(embedder, "/v1/embeddings", {"input": [ids, other_ids]}).json()
    assert one_ids["data"][0]["embedding"] == by_text[0]
    assert [d["embedding"] for d in many_ids["data"]] == by_text
    assert [d["index"] for d in many_ids["data"]] == [0, 1]
    assert many_ids["usage"]["prompt_tokens"] == len(ids) + len(other_ids)


def test_base64_is_little_endian_float32_of_the_same_vector(embedder):
    text = "base64 round trip"
    floats = post(embedder, "/v1/embeddings", {"input": text, "encoding_format": "float"}).json()
    encoded = post(embedder, "/v1/embeddings", {"input": text, "encoding_format": "base64"}).json()
    raw = base64.b64decode(encoded["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    expected = floats["data"][0]["embedding"]
    assert len(decoded) == len(expected) == 384
    assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7) for a, b in zip(decoded, expected, strict=True))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": []}, "cannot be empty"),
        ({"input": 42}, "must be a string"),
        ({"input": ["a", 1]}, "must be a string"),
        ({"input": "x", "dimensions": 64}, "does not support matryoshka"),
        ({"input": "word " * 80}, "longer than the model's context length (64 tokens)"),
    ],
)
def test_bad_requests_are_sglangs_400(embedder, body, words):
    reply = post(embedder, "/v1/embeddings", body)
    assert reply.status_code == 400
    error = reply.json()
    assert error["object"] == "error" and error["code"] == 400 and words in error["message"]


def test_dimensions_truncate_only_on_a_matryoshka_profile(matryoshka):
    full = post(matryoshka, "/v1/embeddings", {"input": "nested dolls"}).json()["data"][0]["embedding"]
    short = post(matryoshka, "/v1/embeddings", {"input": "nested dolls", "dimensions": 64}).json()
    vector = short["data"][0]["embedding"]
    assert len(full) == 256 and len(vector) == 64
    norm = math.sqrt(sum(x * x for x in full[:64]))
    assert all(math.isclose(a, b / norm, rel_tol=1e-9) for a, b in zip(vector, full[:64], strict=True))
    refused = post(matryoshka, "/v1/embeddings", {"input": "nested dolls", "dimensions": 100})
    assert refused.status_code == 400 and "[64, 128]" in refused.json()["message"]


def test_encode_is_the_native_form(embedder):
    single = post(embedder, "/encode", {"text": "hello there", "rid": "r-1"}).json()
    assert single["embedding"] == vectors(embedder, ["hello there"])[0]
    assert single["meta_info"]["id"] == "r-1"
    assert single["meta_info"]["prompt_tokens"] == len(tok.encode("hello there"))
    batch = post(embedder, "/encode", {"text": ["a b", "c"]}).json()
    assert isinstance(batch, list) and len(batch) == 2
    assert post(embedder, "/encode", {}).json() == {
        "error": {"message": "Exactly one of `text` or `input_ids` must be given."}
    }


def test_shared_words_are_measurably_closer_than_unrelated_text(embedder):
    query, near, near_too, far = vectors(
        embedder,
        [
            "How does the prefix cache reuse tokens?",
            "The prefix cache lets the engine reuse tokens of earlier prompts.",
            "Caching prefixes saves recomputing tokens.",
            "Penguins waddle across Antarctic ice in winter.",
        ],
    )
    assert cosine(query, near) > cosine(query, near_too) > cosine(query, far)
    assert cosine(query, near) - cosine(query, far) > 0.3
    assert math.isclose(cosine(query, query), 1.0, rel_tol=1e-9)


def test_the_vectors_are_lexical_not_semantic(embedder):
    car, automobile, cars = vectors(embedder, ["car", "automobile", "cars"])
    # A shared stem (character n-grams) is close; a synonym sharing no letters is not.
    assert cosine(car, cars) > 0.3 > abs(cosine(car, automobile))


def test_vectors_are_the_same_in_another_process(embedder):
    text = "Determinism across processes"
    script = f"import json; from simulator.embedding import embed_text; print(json.dumps(embed_text({text!r}, 384)))"
    env = {"PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    assert json.loads(out.stdout) == vectors(embedder, [text])[0] == embed_text(text, 384)


def test_model_info_says_it_does_not_generate_and_generation_routes_refuse(embedder):
    info = httpx.get(f"{embedder.url}/get_model_info").json()
    assert info["is_generation"] is False
    models = httpx.get(f"{embedder.url}/v1/models").json()
    assert [card["id"] for card in models["data"]] == [MODEL_NAME]
    assert httpx.get(f"{embedder.url}/health", timeout=10).status_code == 200
    chat = post(
        embedder, "/v1/chat/completions", {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert chat.status_code == 400 and chat.json()["message"] == NOT_GENERATION
    native = post(embedder, "/generate", {"text": "hi"})
    assert native.status_code == 400 and native.json() == {"error": {"message": NOT_GENERATION}}


def test_a_generation_server_refuses_embeddings_as_sglang_does(generator):
    assert httpx.get(f"{generator.url}/get_model_info").json()["is_generation"] is True
    openai = post(generator, "/v1/embeddings", {"input": "hi"})
    assert openai.status_code == 400 and openai.json()["message"] == NOT_EMBEDDING
    assert "Please add `--is-embedding`" in NOT_EMBEDDING
    native = post(generator, "/encode", {"text": "hi"})
    assert native.status_code == 400 and native.json() == {"error": {"message": NOT_EMBEDDING}}

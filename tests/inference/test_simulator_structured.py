"""The simulated worker's structured outputs, logprobs, n > 1 and sampling ranges, on the wire (§10.2-§10.5)."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.inference.test_simulator_protocol import sse_payloads

ASK = [{"role": "user", "content": "Describe a trip to Lisbon for two people"}]


class Stop(BaseModel):
    city: str
    nights: int = Field(ge=1, le=14)


class Trip(BaseModel):
    title: str = Field(min_length=3, max_length=40)
    travellers: int
    budget: float | None = None
    mode: str = Field(json_schema_extra={"enum": ["train", "plane", "car"]})
    stops: list[Stop] = Field(min_length=1, max_length=3)
    tags: list[str] = []


def post(worker, **body):
    return httpx.post(f"{worker.url}/v1/chat/completions", json=body, timeout=30)


def content(answer) -> str:
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["message"]["content"]


def test_json_schema_output_satisfies_the_schema_and_is_deterministic_by_seed(worker):
    schema = Trip.model_json_schema()
    fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": schema, "strict": False}}
    outputs = []
    for seed in range(6):
        text = content(post(worker, messages=ASK, response_format=fmt, seed=seed, temperature=0.8))
        jsonschema.validate(json.loads(text), schema)
        Trip.model_validate_json(text)
        outputs.append(text)
    assert len(set(outputs)) > 1
    assert content(post(worker, messages=ASK, response_format=fmt, seed=3, temperature=0.8)) == outputs[3]
    shorthand = {"type": "json_schema", "schema": {"type": "array", "items": {"type": "integer"}, "minItems": 2}}
    value = json.loads(content(post(worker, messages=ASK, response_format=shorthand)))
    assert len(value) >= 2 and all(isinstance(v, int) for v in value)


def test_json_object_gives_an_object(worker):
    for seed in range(3):
        value = json.loads(content(post(worker, messages=ASK, response_format={"type": "json_object"}, seed=seed)))
        assert isinstance(value, dict)


async def test_the_openai_sdks_parse_with_a_pydantic_model(worker):
    async with openai.AsyncOpenAI(base_url=f"{worker.url}/v1", api_key="none") as client:
        completion = await client.chat.completions.parse(model="sim-small", messages=ASK, response_format=Trip)
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Trip) and 1 <= len(parsed.stops) <= 3 and parsed.mode in ("train", "plane", "car")


def test_regex_and_ebnf_outputs_are_in_their_language(worker):
    pattern = r"(Mr|Ms)\. [A-Z][a-z]{2,8}, \d{3}-\d{4}( ext\. \d+)?"
    for seed in range(4):
        assert re.fullmatch(pattern, content(post(worker, messages=ASK, regex=pattern, seed=seed, temperature=1)))
    grammar = 'root ::= greeting " " name ("!" | ".")\ngreeting ::= "hello" | "hi"\nname ::= [A-Z] [a-z]+\n'
    for seed in range(4):
        text = content(post(worker, messages=ASK, ebnf=grammar, seed=seed, temperature=1))
        assert re.fullmatch(r"(hello|hi) [A-Z][a-z]+[!.]", text), text
    recursive = 'root ::= expr\nexpr ::= term (("+" | "*") term)*\nterm ::= [0-9] | "(" expr ")"\n'
    text = content(post(worker, messages=ASK, ebnf=recursive, seed=5, temperature=1))
    assert re.fullmatch(r"[0-9()+*]+", text) and text.count("(") == text.count(")")


def test_generate_takes_grammars_in_sampling_params(worker):
    body = {"text": "A code:", "sampling_params": {"regex": r"[A-Z]{3}-\d{2}", "max_new_tokens": 64}}
    answer = httpx.post(f"{worker.url}/generate", json=body, timeout=30).json()
    assert re.fullmatch(r"[A-Z]{3}-\d{2}", answer["text"])
    schema = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
    body = {"text": "Status:", "sampling_params": {"json_schema": schema, "max_new_tokens": 64}}
    assert isinstance(json.loads(httpx.post(f"{worker.url}/generate", json=body).json()["text"])["ok"], bool)


def test_a_length_stop_cuts_the_grammar_output(worker):
    fmt = {"type": "json_schema", "json_schema": {"name": "t", "schema": Trip.model_json_schema()}}
    choice = post(worker, messages=ASK, response_format=fmt, max_tokens=4).json()["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["content"].startswith("{")


def test_grammar_errors_are_sglangs(worker):
    def error(**body):
        answer = post(worker, messages=ASK, **body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["object"] == "error" and answer.json()["code"] == 400
        return answer.json()["message"]

    assert error(response_format={"type": "json_schema", "json_schema": {"name": "x"}}) == (
        "schema_ is required for json_schema response format request."
    )
    refused = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": refused}}
    assert error(response_format=fmt).startswith("Failed to compile json grammar: ")
    for keyword in ({"not": {}}, {"if": {}}, {"uniqueItems": True}, {"format": "zipcode"}):
        schema = {"type": "string", **keyword}
        message = error(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        assert message.startswith("Failed to compile json grammar: ")
    assert error(regex="(?=a)b").startswith("Failed to compile regex grammar: ")
    assert error(regex=r"(a)\1").startswith("Failed to compile regex grammar: ")
    assert error(ebnf='start ::= "a"').startswith("Failed to compile ebnf grammar: ")
    assert (
        error(regex="a+", ebnf='root ::= "a"') == "Only one of json_schema, regex, ebnf, or structural_tag can be set."
    )
    assert error(response_format={"type": "json_object"}, regex="a") == (
        "Only one of json_schema, regex, ebnf, or structural_tag can be set."
    )
    strict = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}}
    assert "strict" in error(response_format=strict)


def test_a_grammar_error_on_a_stream_is_one_event_then_done(worker):
    response = post(worker, messages=ASK, regex="(?<=x)y", stream=True)
    assert response.status_code == 200
    error, done = sse_payloads(response.text)
    assert done == "[DONE]"
    assert error["error"]["code"] == 400 and error["error"]["message"].startswith("Failed to compile regex grammar: ")


# -- logprobs ---------------------------------------------------------------------------------------------


def test_chat_logprobs_come_from_the_sampled_distribution(worker):
    body = post(worker, messages=ASK, logprobs=True, top_logprobs=3, max_tokens=12, temperature=0.7, seed=1).json()
    choice = body["choices"][0]
    entries = choice["logprobs"]["content"]
    assert len(entries) == body["usage"]["completion_tokens"] == 12
    assert "".join(e["token"] for e in entries) == choice["message"]["content"]
    for e in entries:
        assert e["logprob"] <= 0 and bytes(e["bytes"]).decode() == e["token"]
        tops = [t["logprob"] for t in e["top_logprobs"]]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and tops[0] >= e["logprob"]
        assert len({t["token"] for t in e["top_logprobs"]}) == 3
    # Some words were real choices between alternatives, not forced tokens.
    assert any(e["logprob"] < -0.1 for e in entries)
    assert post(worker, messages=ASK, max_tokens=3).json()["choices"][0]["logprobs"] is None


def test_streamed_logprobs_carry_only_the_new_tokens(worker):
    body = {"messages": ASK, "logprobs": True, "top_logprobs": 1, "max_tokens": 10, "temperature": 0}
    whole = post(worker, **body).json()["choices"][0]["logprobs"]["content"]
    *chunks, done = sse_payloads(post(worker, **body, stream=True).text)
    assert done == "[DONE]"
    streamed = [
        e
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"]
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    assert streamed == whole
    assert chunks[0]["choices"][0]["logprobs"] is None  # the role chunk


# -- n > 1 ------------------------------------------------------------------------------------------------


def test_n_choices_in_index_order_with_usage_summed(worker):
    body = post(worker, messages=ASK, n=3, temperature=0.9, seed=4, max_tokens=20).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    texts = [c["message"]["content"] for c in body["choices"]]
    assert len(set(texts)) > 1
    single = post(worker, messages=ASK, max_tokens=20, temperature=0.9, seed=4).json()
    assert body["usage"]["prompt_tokens"] == single["usage"]["prompt_tokens"]
    assert body["usage"]["completion_tokens"] == 3 * 20
    assert post(worker, messages=ASK, n=3, temperature=0.9, seed=4, max_tokens=20).json()["choices"] == body["choices"]


def test_n_streams_interleave_with_one_role_chunk_each_and_finishes_last(worker):
    response = post(worker, messages=ASK, n=2, max_tokens=6, stream=True, stream_options={"include_usage": True})
    *chunks, done = sse_payloads(response.text)
    assert done == "[DONE]"
    usage = chunks.pop()
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
    ids = {c["choices"][0]["index"]: c["id"] for c in chunks}
    assert len(set(ids.values())) == 2
    assert all(c["id"] == ids[c["choices"][0]["index"]] for c in chunks)
    roles = [c for c in chunks if c["choices"][0]["delta"].get("role") == "assistant"]
    assert sorted(c["choices"][0]["index"] for c in roles) == [0, 1]
    finishes = [i for i, c in enumerate(chunks) if c["choices"][0]["finish_reason"]]
    assert finishes == [len(chunks) - 2, len(chunks) - 1]
    assert [chunks[i]["choices"][0]["index"] for i in finishes] == [0, 1]


# -- sampling ranges -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("top_p", 0.0, "top_p must be in (0, 1], got 0.0."),
        ("top_k", 0, "top_k must be -1 (disable), or at least 1, got 0."),
        ("min_p", 1.5, "min_p must be in [0, 1], got 1.5."),
        ("presence_penalty", 2.5, "presence_penalty must be in [-2, 2], got 2.5."),
        ("frequency_penalty", -3, "frequency_penalty must be in [-2, 2], got -3.0."),
        ("repetition_penalty", 0, "repetition_penalty must be in (0, 2], got 0.0."),
        ("logit_bias", {"999999999999": 1}, "logit_bias must has keys in [0, "),
    ],
)
def test_sampling_ranges_are_sglangs_400s(worker, field, value, message):
    answer = post(worker, messages=ASK, **{field: value})
    assert answer.status_code == 400 and answer.json()["message"].startswith(message)


def test_sampling_extensions_in_range_are_accepted_and_top_k_1_is_greedy(worker):
    body = {
        "messages": ASK,
        "max_tokens": 12,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "repetition_penalty": 1.1,
        "logit_bias": {"20": -100},
        "min_p": 0.05,
    }
    assert post(worker, **body).status_code == 200
    greedy = content(post(worker, messages=ASK, max_tokens=12, temperature=0))
    assert content(post(worker, messages=ASK, max_tokens=12, temperature=1.5, top_k=1, seed=9)) == greedy

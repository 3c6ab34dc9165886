"""The simulated worker's request tracing (``--enable-trace``) exports what SGLang 0.5.23 exports.

Protocol note §10.11 and ``simulator/tracing.py``: per request a root span ``" Req <rid[:8]>"``, a child
of the caller's ``traceparent``, over a tokenizer part and a scheduler part that hold the stage spans;
token usage, sampling parameters and latencies on the root; no prompt or output text anywhere. The
spans go over OTLP/HTTP to a receiver in this process (``tests/support/otlp.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import httpx
import pytest

from harness.engines import free_port, get_load, start_simulator
from tests.support.otlp import OTLPReceiver, ReceivedSpan
from tests.support.waiting import wait_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
HTTP = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "SGLANG_OTLP_EXPORTER_SCHEDULE_DELAY_MILLIS": "50"}
#: A word no span may carry: it is only ever in prompts.
SECRET = "quetzalcoatlus"
TOKENIZER_STAGES = {"tokenize", "api_server_dispatch"}
SCHEDULER_STAGES = {"request_process", "prefill_waiting", "prefill_forward", "decode_waiting", "decode_forward"}


def traceparent(span_id: str) -> str:
    return f"00-{TRACE_ID}-{span_id}-01"


def root_of(receiver: OTLPReceiver, rid: str) -> ReceivedSpan:
    """The root span of request ``rid``, once it (ended last) has arrived."""
    found = receiver.wait_for(lambda spans: [s for s in spans if s.name == f" Req {rid[:8]}"])
    assert len(found) == 1, found
    return found[0]


def tree(receiver: OTLPReceiver, root: ReceivedSpan) -> list[ReceivedSpan]:
    """Every span below ``root`` (its descendants, at any depth)."""
    spans = [s for s in receiver.spans() if s.trace_id == root.trace_id]
    below, frontier = [], {root.span_id}
    while frontier:
        children = [s for s in spans if s.parent_span_id in frontier]
        below += children
        frontier = {s.span_id for s in children}
    return below


def sse(body: str) -> list:
    return [json.loads(line[6:]) for line in body.split("\n\n") if line.startswith("data: {")]


@pytest.fixture(scope="module")
def receiver():
    with OTLPReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def traced(receiver):
    with start_simulator(
        "--enable-trace",
        "--otlp-traces-endpoint",
        f"{receiver.endpoint}/v1/traces",
        "--enable-cache-report",
        env=HTTP,
    ) as w:
        yield w


def test_generate_root_is_a_child_of_the_traceparent_with_the_usage_and_stages(traced, receiver):
    body = {
        "text": f"Tell me about the {SECRET} and its wings",
        "sampling_params": {"max_new_tokens": 6, "temperature": 0.5, "top_p": 0.9, "ignore_eos": True},
    }
    response = httpx.post(
        f"{traced.url}/generate", json=body, headers={"traceparent": traceparent("00f067aa0ba902b7")}, timeout=10
    )
    assert response.status_code == 200
    assert not any(h in response.headers for h in ("traceparent", "tracestate")), "nothing is echoed back"
    meta = response.json()["meta_info"]
    root = root_of(receiver, meta["id"])

    assert (root.trace_id, root.parent_span_id, root.service) == (TRACE_ID, "00f067aa0ba902b7", "sglang")
    attrs = root.attributes
    assert attrs["rid"] == attrs["gen_ai.request.id"] == meta["id"]
    assert attrs["module"] == "sglang::request"
    assert attrs["gen_ai.usage.prompt_tokens"] == meta["prompt_tokens"]
    assert attrs["gen_ai.usage.completion_tokens"] == meta["completion_tokens"] == 6
    assert attrs["gen_ai.usage.cached_tokens"] == meta["cached_tokens"]
    assert (attrs["gen_ai.request.max_tokens"], attrs["gen_ai.request.temperature"]) == (6, 0.5)
    assert attrs["gen_ai.request.top_p"] == 0.9 and "gen_ai.request.top_k" not in attrs  # only what was sent
    assert attrs["gen_ai.response.model"] == "sim-small"
    assert attrs["gen_ai.response.finish_reasons"] == '["length"]'
    latency = {k.removeprefix("gen_ai.latency."): v for k, v in attrs.items() if k.startswith("gen_ai.latency.")}
    assert set(latency) == {
        "time_to_first_token",
        "e2e",
        "time_in_model_decode",
        "time_in_model_inference",
        "time_in_model_prefill",
    }
    assert 0 < latency["time_to_first_token"] <= latency["e2e"]

    below = tree(receiver, root)
    parts = {s.attributes.get("thread_label"): s for s in below if s.parent_span_id == root.span_id}
    assert set(parts) == {"Tokenizer", "Scheduler"}
    assert parts["Tokenizer"].name.startswith("Tokenizer(host:")
    assert parts["Scheduler"].name.startswith("Scheduler [TP 0]  [PP 0] (host:")
    by_part = {label: {s.name for s in below if s.parent_span_id == part.span_id} for label, part in parts.items()}
    assert by_part == {"Tokenizer": TOKENIZER_STAGES, "Scheduler": SCHEDULER_STAGES}
    forward = next(s for s in below if s.name == "decode_forward")
    loops = sorted((s for s in below if s.name == "decode_loop"), key=lambda s: s.attributes["decode_ct"])
    assert [s.attributes["decode_ct"] for s in loops] == list(range(5))  # one per decode step
    assert all(s.parent_span_id == forward.span_id for s in loops)
    assert all(root.start_ns <= s.start_ns <= s.end_ns <= root.end_ns for s in below)
    stage = {s.name: s for s in below}
    # Each stage follows the previous one by a link, across the tokenizer/scheduler hand-off too.
    assert stage["request_process"].links == (stage["api_server_dispatch"].span_id,)
    assert stage["prefill_forward"].links == (stage["prefill_waiting"].span_id,)

    assert not any(SECRET.encode() in raw for raw in receiver.raw())
    assert not any(response.json()["text"].encode() in raw for raw in receiver.raw())


def test_streamed_chat_root_is_a_child_of_the_traceparent_with_the_streamed_usage(traced, receiver):
    messages = [{"role": "user", "content": f"A long question about the {SECRET}, asked twice to be cached"}]
    body = {"messages": messages, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 5}
    httpx.post(f"{traced.url}/v1/chat/completions", json={**body, "stream": False}, timeout=10)  # warms the cache
    headers = {"traceparent": traceparent("a3ce929d0e0e4736"), "tracestate": "congo=t61rcWkgMzE"}
    with httpx.stream("POST", f"{traced.url}/v1/chat/completions", json=body, headers=headers, timeout=10) as r:
        assert "traceparent" not in r.headers
        chunks = sse(r.read().decode())
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0
    root = root_of(receiver, chunks[0]["id"])

    assert (root.trace_id, root.parent_span_id) == (TRACE_ID, "a3ce929d0e0e4736")
    attrs = root.attributes
    assert attrs["gen_ai.usage.prompt_tokens"] == usage["prompt_tokens"]
    assert attrs["gen_ai.usage.completion_tokens"] == usage["completion_tokens"]
    assert attrs["gen_ai.usage.cached_tokens"] == usage["prompt_tokens_details"]["cached_tokens"]
    # What SGLang's chat layer hands on: max_tokens as sent, the model's generation config, OpenAI's n and top_k.
    assert attrs["gen_ai.request.max_tokens"] == 5
    assert (attrs["gen_ai.request.temperature"], attrs["gen_ai.request.top_p"]) == (0.7, 0.8)
    assert (attrs["gen_ai.request.top_k"], attrs["gen_ai.request.n"]) == (-1, 1)
    names = {s.name for s in tree(receiver, root)}
    assert TOKENIZER_STAGES | {"request_process", "prefill_waiting", "prefill_forward"} <= names
    assert not any(SECRET.encode() in raw for raw in receiver.raw())


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_every_generation_route_continues_the_callers_trace(traced, receiver, path, stream):
    parent = os.urandom(8).hex()
    if path == "/generate":
        body = {"text": "Hello there", "sampling_params": {"max_new_tokens": 3}}
    elif path == "/v1/completions":
        body = {"prompt": "Hello there", "max_tokens": 3}
    else:
        body = {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 3}
    response = httpx.post(
        f"{traced.url}{path}", json={**body, "stream": stream}, headers={"traceparent": traceparent(parent)}, timeout=10
    )
    assert response.status_code == 200
    if stream:
        first = sse(response.text)[0]
        rid = first["meta_info"]["id"] if path == "/generate" else first["id"]
    else:
        answer = response.json()
        rid = answer["meta_info"]["id"] if path == "/generate" else answer["id"]
    root = root_of(receiver, rid)
    assert (root.trace_id, root.parent_span_id) == (TRACE_ID, parent)
    assert root.attributes["gen_ai.usage.completion_tokens"] >= 1


def test_without_a_traceparent_the_root_starts_a_trace_with_a_64_bit_id(traced, receiver):
    answer = httpx.post(f"{traced.url}/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 2}}).json()
    root = root_of(receiver, answer["meta_info"]["id"])
    assert root.parent_span_id == "" and root.trace_id.startswith("0" * 16) and root.trace_id != "0" * 32


def test_aborted_requests_end_their_spans():
    """A running request aborted by its client's disconnect, and a queued one aborted by /abort_request."""
    with (
        OTLPReceiver() as receiver,
        start_simulator(
            "--enable-trace",
            "--otlp-traces-endpoint",
            f"{receiver.endpoint}/v1/traces",
            "--decode-step-time",
            "0.01",
            "--max-running-requests",
            "1",
            env=HTTP,
        ) as w,
    ):
        long = {"sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}, "stream": True}
        with httpx.stream("POST", f"{w.url}/generate", json={**long, "text": "Go on", "rid": "abortrunning"}) as r:
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("data: {"))  # it runs
            second = {**long, "text": "Me too", "rid": "abortqueued"}
            queued = threading.Thread(target=httpx.post, args=(f"{w.url}/generate",), kwargs={"json": second})
            queued.start()
            wait_until(lambda: get_load(w.url)["num_waiting_reqs"] == 1, what="the second request queued")
            assert httpx.post(f"{w.url}/abort_request", json={"rid": "abortqueued"}).status_code == 200
            queued.join(10)
        # Leaving the stream closes the connection: the running request is aborted after one more step.

        running = root_of(receiver, "abortrunning")
        assert running.attributes["gen_ai.response.finish_reasons"] == '["abort"]'
        assert 1 <= running.attributes["gen_ai.usage.completion_tokens"] < 3000
        parts = [s for s in tree(receiver, running) if s.parent_span_id == running.span_id]
        assert {s.status for s in parts} == {"UNSET"}

        waiting = root_of(receiver, "abortqueued")
        # SGLang's tokenizer only hears of the abort: latencies, no usage.
        assert "gen_ai.latency.e2e" in waiting.attributes
        assert not any(k.startswith("gen_ai.usage.") for k in waiting.attributes)
        scheduler = next(s for s in tree(receiver, waiting) if s.attributes.get("thread_label") == "Scheduler")
        assert scheduler.status == "ERROR" and scheduler.attributes["reason"] == "have unclosed span, auto closed"


def test_without_enable_trace_nothing_is_exported():
    with OTLPReceiver() as receiver:
        # Every way a stray exporter could find the receiver.
        env = {
            **HTTP,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.endpoint}/v1/traces",
        }
        with start_simulator("--otlp-traces-endpoint", f"{receiver.endpoint}/v1/traces", env=env) as w:
            headers = {"traceparent": traceparent("00f067aa0ba902b7")}
            for path, body in (
                ("/generate", {"text": f"about the {SECRET}", "sampling_params": {"max_new_tokens": 3}}),
                ("/v1/completions", {"prompt": "Hello", "max_tokens": 3}),
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}),
            ):
                for stream in (False, True):
                    response = httpx.post(f"{w.url}{path}", json={**body, "stream": stream}, headers=headers)
                    assert response.status_code == 200
        # The worker has stopped: a tracing worker would have flushed every span by now (next test).
        assert receiver.raw() == []


def test_spans_still_buffered_are_flushed_at_shutdown_under_the_given_service_name():
    with OTLPReceiver() as receiver:
        slow_export = {**HTTP, "SGLANG_OTLP_EXPORTER_SCHEDULE_DELAY_MILLIS": "600000"}
        with start_simulator(
            "--enable-trace",
            "--otlp-traces-endpoint",
            f"{receiver.endpoint}/v1/traces",
            "--otlp-service-name",
            "sim-traced",
            env=slow_export,
        ) as w:
            answer = httpx.post(f"{w.url}/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 2}})
            rid = answer.json()["meta_info"]["id"]
        root = root_of(receiver, rid)  # sent when the worker stopped, not 10 minutes later
        assert root.service == "sim-traced"


@pytest.mark.parametrize("protocol", [None, "grpc"])
def test_the_grpc_protocol_refuses_to_start_with_the_fix_in_one_line(protocol):
    env = {k: v for k, v in os.environ.items() if k != "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"}
    if protocol:
        env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = protocol
    done = subprocess.run(
        [sys.executable, "-m", "simulator", "--enable-trace", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf" in lines[0], done.stderr

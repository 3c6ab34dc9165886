"""What a caller can put in a request must never take a model server down for everyone.

The routing key (an API caller's `user` field or X-Conversation-Key header) is sent to the gateway only
as a fixed-length digest, never to a node; and a request that fails for what it is (one the client
cannot send, one the engine refuses with a 4xx) is the request's fault, never counted against the
node's health.
"""

from __future__ import annotations

import asyncio
import string
import uuid

import pytest

from chat.generation import engine
from chat.generation.engine import Job
from inference import environment, fleet
from inference.client import ROUTING_KEY_HEADER, GenerationRequest, SGLangClient, routing_key_header
from inference.errors import EngineBadRequest
from inference.health import poll_nodes
from inference.models import InferenceNode
from tests.inference.helpers import chat, collect
from tests.support.engines import start_simulator

HOSTILE_KEYS = [
    "line\nbreak",
    "carriage\r\nX-Injected: 1",
    "nul\x00byte",
    "Grüße, 日本語, 🙂",
    "latin-1 as Django reads header bytes: Ã©",
    "lone surrogate \ud800",
    "x" * 10240,
    " ",
]


@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=lambda key: repr(key[:24]))
def test_the_routing_key_header_is_a_fixed_length_ascii_digest_of_the_key(key):
    value = routing_key_header(key)
    assert len(value) == len(routing_key_header("conversation-1")) == 32
    assert set(value) <= set(string.hexdigits.lower())
    assert value == routing_key_header(key)  # the same conversation always gets the same value
    assert value != routing_key_header(key + "!")


def test_the_header_goes_to_the_gateway_only():
    request = GenerationRequest(prompt="Hi", routing_key="carriage\r\nX-Injected: 1")
    assert SGLangClient("http://gpu-1:30000").headers_for(request) == {}
    assert SGLangClient("http://gateway:30080", behind_gateway=True).headers_for(request) == {
        ROUTING_KEY_HEADER: routing_key_header("carriage\r\nX-Injected: 1")
    }
    unkeyed = GenerationRequest(prompt="Hi")
    assert SGLangClient("http://gateway:30080", behind_gateway=True).headers_for(unkeyed) == {}


@pytest.fixture(scope="module")
def worker():
    with start_simulator("--accept-any-model", speed="fast") as w:
        yield w


async def test_a_request_the_client_cannot_send_is_the_requests_fault_not_the_nodes(worker):
    """h11 refuses a header with a line break (httpx.LocalProtocolError, here in the client's own API key):
    nothing reached the engine, so it is a bad request, and no evidence against the node."""
    async with SGLangClient(worker.url, api_key="line\nbreak") as client:
        with pytest.raises(EngineBadRequest) as refused:
            await collect(client, GenerationRequest(messages=chat("Hello"), max_new_tokens=2))
        with pytest.raises(EngineBadRequest):
            await client.generate(GenerationRequest(messages=chat("Hello"), max_new_tokens=2))
    assert not refused.value.node_at_fault
    async with SGLangClient(worker.url) as client:  # the engine itself was fine all along
        assert (await collect(client, GenerationRequest(messages=chat("Hello"), max_new_tokens=2))).text


@pytest.fixture
def one_node(settings):
    def configure(url: str, api_key: str = "") -> InferenceNode:
        settings.INFERENCE_NODES = [f"gpu1={url}"]
        environment.forget_sync()
        fleet.invalidate()
        poll_nodes()
        node = InferenceNode.objects.get(name="gpu1")
        assert node.health == "up"
        if api_key:
            InferenceNode.objects.filter(pk=node.pk).update(api_key=api_key)
            fleet.invalidate()
        return node

    yield configure
    environment.forget_sync()
    fleet.invalidate()


async def _answer(routing_key: str) -> str:
    job = await engine.route_job_async(
        Job(
            model="sim-small",
            rid=uuid.uuid4().hex,
            messages=chat("Hello"),
            max_tokens=4,
            prompt_estimate=8,
            routing_key=routing_key,
        )
    )
    return "".join([event.text async for event in engine.stream(job)])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "engine_args, api_key",
    [
        (("--fault-error-rate", "1.0", "--fault-error-status", "400"), ""),
        (("--fault-error-rate", "1.0", "--fault-error-status", "422"), ""),
        ((), "line\nbreak"),
    ],
    ids=["engine-says-400", "engine-says-422", "request-cannot-be-sent"],
)
def test_requests_that_fail_for_what_they_are_never_mark_the_node_down(settings, one_node, engine_args, api_key):
    with start_simulator("--accept-any-model", *engine_args, speed="fast") as worker:
        one_node(worker.url, api_key)
        for attempt in range(settings.INFERENCE_DOWN_AFTER * 2):
            with pytest.raises(EngineBadRequest):
                asyncio.run(_answer(f"conversation-{attempt}"))
        assert InferenceNode.objects.get(name="gpu1").health == "up"
        fleet.invalidate()
        assert [view.health for view in fleet.snapshot()] == ["up"]

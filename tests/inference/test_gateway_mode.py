"""Gateway mode: the product in front of a real smg, which routes across simulated workers, with the
admin as the one place nodes are managed (its node changes reach smg's worker list)."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from django.urls import reverse

from accounts.api_keys import create_api_key
from audit.models import AuditEntry
from chat.generation import engine
from chat.generation.engine import Job
from harness.engines import http_get, start_gateway, start_simulator
from inference import environment, fleet, gateway
from inference.health import poll_nodes
from inference.models import InferenceNode
from tests.support.accounts import make_staff, signed_in
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet_behind_gateway(settings):
    first, second = start_simulator("--enable-metrics"), start_simulator("--enable-metrics")
    smg = start_gateway([first.url], policy="manual")
    settings.INFERENCE_ROUTING, settings.INFERENCE_GATEWAY_URL = "gateway", smg.url
    settings.INFERENCE_NODES = [f"first={first.url}"]
    environment.forget_sync()
    fleet.invalidate()
    yield first, second, smg
    environment.forget_sync()
    fleet.invalidate()
    for process in (smg, first, second):
        process.stop()


def listed() -> set[str]:
    return {worker.url for worker in gateway.workers()}


def test_a_node_added_in_the_admin_appears_in_smgs_workers_and_leaves_when_disabled(fleet_behind_gateway):
    first, second, _ = fleet_behind_gateway
    staff = signed_in(make_staff("root@example.com", is_superuser=True))
    added = staff.post(
        reverse("admin:inference_inferencenode_add"),
        {
            "name": "second",
            "base_url": second.url,
            "api_key": "",
            "model_ids": "[]",
            "group": "default",
            "weight": "100",
            "enabled": "on",
        },
    )
    assert added.status_code == 302, added.content.decode()[:2000]
    wait_until(lambda: listed() == {first.url, second.url}, what="smg to list the node added in the admin")

    node = InferenceNode.objects.get(name="second")
    changelist = reverse("admin:inference_inferencenode_changelist")
    staff.post(changelist, {"action": "disable_nodes", "_selected_action": [node.pk]})
    wait_until(lambda: listed() == {first.url}, what="smg to drop the disabled node")
    assert AuditEntry.objects.filter(action="inference.disable", target_id=str(node.pk)).exists()

    staff.post(changelist, {"action": "enable_nodes", "_selected_action": [node.pk]})
    wait_until(lambda: listed() == {first.url, second.url}, what="smg to list the enabled node again")
    deleted = staff.post(changelist, {"action": "delete_selected", "_selected_action": [node.pk], "post": "yes"})
    assert deleted.status_code == 302 and not InferenceNode.objects.filter(pk=node.pk).exists()
    wait_until(lambda: listed() == {first.url}, what="smg to drop the node deleted in the admin")
    assert [view.name for view in fleet.snapshot()] == ["first"]


@pytest.mark.usefixtures("fleet_behind_gateway")
def test_the_poller_reads_health_and_load_from_the_gateway():
    poll_nodes()
    node = InferenceNode.objects.get(name="first")
    assert node.health == "up"
    [view] = fleet.snapshot()
    assert view.load is not None and view.load.source == "engine_metrics"


def test_answers_stream_through_the_gateway_with_the_conversation_as_routing_key(fleet_behind_gateway):
    _, _, smg = fleet_behind_gateway
    job = engine.route_job(
        Job(
            model="sim-small",
            rid="gw-1",
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=16,
            prompt_estimate=4,
            routing_key="conversation-1",
        )
    )
    assert job.via_gateway and job.url == smg.url and job.node == "gateway"

    async def answer() -> str:
        return "".join([event.text async for event in engine.stream(job)])

    assert asyncio.run(answer())


def test_the_poller_brings_smgs_workers_back_in_line_with_the_nodes(fleet_behind_gateway):
    """What the admin could not tell smg at the time (smg down or restarted) is put right by the next
    poll: a disabled node's worker leaves, as does a worker no node names any more (a node deleted,
    or its URL changed, meanwhile); a node smg forgot is registered again."""
    first, second, _ = fleet_behind_gateway
    poll_nodes()
    wait_until(lambda: listed() == {first.url}, what="smg to list the environment's node")

    InferenceNode.objects.create(name="second", base_url=second.url, enabled=False)
    gateway.register(second.url)
    wait_until(lambda: listed() == {first.url, second.url}, what="smg to list the stray worker")
    poll_nodes()
    wait_until(lambda: listed() == {first.url}, what="the poller to remove the disabled node's worker")

    InferenceNode.objects.filter(name="second").delete()
    gateway.register(second.url)
    wait_until(lambda: listed() == {first.url, second.url}, what="smg to list the stray worker")
    poll_nodes()
    wait_until(lambda: listed() == {first.url}, what="the poller to remove a worker no node names")

    gateway.unregister(first.url)
    wait_until(lambda: listed() == set(), what="smg to forget the node")
    poll_nodes()
    wait_until(lambda: listed() == {first.url}, what="the poller to register the node again")


def requests_served(url: str) -> int:
    """The worker's own count of finished requests (sglang:num_requests_total, both label sets)."""
    status, body = http_get(f"{url}/metrics")
    assert status == 200
    return int(sum(float(v) for v in re.findall(r"^sglang:num_requests_total\{[^}]*\} (\S+)$", body.decode(), re.M)))


@pytest.mark.django_db(transaction=True)
def test_hostile_routing_keys_reach_smg_as_a_digest_that_keeps_each_conversation_on_one_worker(settings, user):
    """Through a real Daphne in gateway mode and smg's manual policy: every hostile key is answered, and
    all the turns sent with one key land on one worker (smg sticks to the digest as it did to the key)."""
    put_on_plan(user, "plus")
    _, raw = create_api_key(user, name="test")
    keys = [
        ("user", "line\nbreak"),
        ("user", "Grüße, 日本語, 🙂"),
        ("header", "Grüße".encode()),
        ("header", b"x" * 10240),
        ("header", b"conversation-42"),
    ]
    with (
        start_simulator("--enable-metrics", "--accept-any-model") as first,
        start_simulator("--enable-metrics", "--accept-any-model") as second,
        start_gateway([first.url, second.url], policy="manual") as smg,
    ):
        server = start_daphne(
            engine_url=smg.url, extra_env={"INFERENCE_ROUTING": "gateway", "INFERENCE_GATEWAY_URL": smg.url}
        )
        api = httpx.Client(base_url=server.base_url, timeout=30, headers={"Authorization": f"Bearer {raw}"})
        try:
            for where, key in keys:
                before = [requests_served(w.url) for w in (first, second)]
                for turn in range(4):
                    body = {"model": "sim-small", "messages": [{"role": "user", "content": f"Turn {turn}"}]}
                    if where == "user":
                        answered = api.post("/v1/chat/completions", json={**body, "user": key})
                    else:
                        answered = api.post("/v1/chat/completions", json=body, headers={"X-Conversation-Key": key})
                    assert answered.status_code == 200, answered.text
                    assert answered.json()["choices"][0]["message"]["content"]
                served = [requests_served(w.url) - b for w, b in zip((first, second), before, strict=True)]
                assert sorted(served) == [0, 4], (where, key[:20], served)
        finally:
            api.close()
            server.stop()


def test_tool_calls_and_choices_pass_through_the_gateway(fleet_behind_gateway):
    """A program's OpenAI fields reach the worker through smg, and its parsed tool calls come back as
    deltas (the gateway forwards the body and the stream as they are)."""
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    job = engine.route_job(
        Job(
            model="sim-small",
            rid="gw-tools",
            messages=[{"role": "user", "content": "What is the weather in Paris? Use get_weather."}],
            max_tokens=64,
            prompt_estimate=20,
            engine_fields={"tools": [weather], "tool_choice": "required", "n": 2},
        )
    )
    assert job.via_gateway

    async def deltas():
        return [delta async for event in engine.stream(job) for delta in event.deltas]

    received = asyncio.run(deltas())
    names = {
        (d.index, call["function"]["name"]) for d in received for call in d.tool_calls if call["function"].get("name")
    }
    assert names == {(0, "get_weather"), (1, "get_weather")}
    assert sorted(d.index for d in received if d.finish_reason) == [0, 1]
    assert {d.finish_reason for d in received if d.finish_reason} == {"tool_calls"}

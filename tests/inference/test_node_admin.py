"""The nodes' admin page: what staff see, the write-only API key, the actions (each audited, and
flush cache / test generate reaching a real simulated worker), and who may use it."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Group
from django.contrib.messages import get_messages
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from audit.models import AuditEntry
from console.roles import MODERATOR_GROUP
from harness.engines import start_simulator
from inference import environment, fleet, samples
from inference.loads import EngineLoad
from inference.models import InferenceNode
from tests.support.accounts import make_staff, signed_in

pytestmark = pytest.mark.django_db

KEY = "node-secret-4711"
CHANGELIST = "admin:inference_inferencenode_changelist"


@pytest.fixture(autouse=True)
def _fresh():
    environment.forget_sync()
    fleet.invalidate()
    yield
    environment.forget_sync()
    fleet.invalidate()


@pytest.fixture
def root():
    return make_staff("root@example.com", is_superuser=True)


@pytest.fixture
def staff(root):
    return signed_in(root)


@pytest.fixture(scope="module")
def keyed_worker():
    """A worker that wants the node's API key on generation and admin routes (/flush_cache)."""
    with start_simulator("--enable-metrics", api_key=KEY) as worker:
        yield worker


def node_form(**changes) -> dict:
    form = {
        "name": "gpu1",
        "base_url": "http://127.0.0.1:9",
        "api_key": "",
        "model_ids": "[]",
        "group": "default",
        "weight": "100",
        "enabled": "on",
    }
    form.update(changes)
    return {key: value for key, value in form.items() if value is not None}


def act(client, action: str, *nodes: InferenceNode):
    return client.post(
        reverse(CHANGELIST), {"action": action, ACTION_CHECKBOX_NAME: [n.pk for n in nodes]}, follow=True
    )


def said(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def evictable_tokens(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "sglang:kv_evictable_tokens"
    )


def test_the_api_key_is_write_only(staff):
    added = staff.post(reverse("admin:inference_inferencenode_add"), node_form(api_key=KEY))
    assert added.status_code == 302, added.content.decode()[:2000]
    node = InferenceNode.objects.get(name="gpu1")
    assert node.api_key == KEY

    change = reverse("admin:inference_inferencenode_change", args=[node.pk])
    page = staff.get(change).content.decode()
    assert 'type="password"' in page and KEY not in page
    assert KEY not in staff.get(reverse(CHANGELIST)).content.decode()

    # Left empty, the stored key stays; a new one replaces it; "remove" clears it.
    assert staff.post(change, node_form(weight="50")).status_code == 302
    node.refresh_from_db()
    assert (node.weight, node.api_key) == (50, KEY)
    staff.post(change, node_form(api_key="rotated-1"))
    assert InferenceNode.objects.get(pk=node.pk).api_key == "rotated-1"
    staff.post(change, node_form(clear_api_key="on"))
    assert InferenceNode.objects.get(pk=node.pk).api_key == ""
    assert not [e for e in AuditEntry.objects.all() if KEY in str(e.details) or "rotated-1" in str(e.details)]


def test_the_list_shows_health_load_models_group_and_weight(staff):
    InferenceNode.objects.create(
        name="gpu1", base_url="http://127.0.0.1:9", health="up", group="blue", weight=70, model_ids=["qwen-7b"]
    )
    InferenceNode.objects.create(name="gpu2", base_url="http://127.0.0.1:10", health="down", draining=True)
    samples.record(
        "gpu1",
        EngineLoad(
            running_requests=3,
            waiting_requests=1,
            used_tokens=400,
            total_tokens=1000,
            token_usage=0.4,
            cache_hit_rate=0.5,
        ),
    )

    page = staff.get(reverse(CHANGELIST)).content.decode()

    for shown in (
        "gpu1",
        "qwen-7b",
        "blue",
        "70",
        "3 running",
        "1 queued",
        "KV 40%",
        "cache hits 50%",
        "s ago",
        "gpu2",
        "draining",
        "no fresh sample",
        "not known yet",
    ):
        assert shown in page, shown


def test_enable_drain_and_disable_change_the_fleet_at_once_and_are_audited(staff, root):
    one = InferenceNode.objects.create(name="gpu1", base_url="http://127.0.0.1:9")
    two = InferenceNode.objects.create(name="gpu2", base_url="http://127.0.0.1:10")
    assert all(view.routable for view in fleet.snapshot())

    act(staff, "drain_nodes", one)
    act(staff, "disable_nodes", two)
    views = {view.name: view for view in fleet.snapshot()}
    assert views["gpu1"].draining and not views["gpu1"].routable
    assert not views["gpu2"].enabled and not views["gpu2"].routable

    response = act(staff, "enable_nodes", one, two)
    assert "Enable: gpu1, gpu2." in said(response)
    assert all(view.routable for view in fleet.snapshot())
    audited = sorted(
        (e.action, e.target_repr, e.actor_id) for e in AuditEntry.objects.filter(action__startswith="inference.")
    )
    assert audited == [
        ("inference.disable", "gpu2", root.pk),
        ("inference.drain", "gpu1", root.pk),
        ("inference.enable", "gpu1", root.pk),
        ("inference.enable", "gpu2", root.pk),
    ]


def test_flush_cache_empties_the_nodes_prefix_cache_with_its_stored_key(staff, keyed_worker):
    node = InferenceNode.objects.create(name="gpu1", base_url=keyed_worker.url, api_key=KEY)
    act(staff, "test_generate", node)  # something in the cache
    assert evictable_tokens(keyed_worker.url) > 0

    response = act(staff, "flush_cache", node)

    assert any(message.startswith("gpu1: cache flushed") for message in said(response)), said(response)
    assert evictable_tokens(keyed_worker.url) == 0
    entry = AuditEntry.objects.get(action="inference.flush_cache")
    assert (entry.target_repr, entry.details["ok"]) == ("gpu1", True)


def test_a_flush_the_node_refuses_is_shown_as_an_error(staff, keyed_worker):
    node = InferenceNode.objects.create(name="gpu1", base_url=keyed_worker.url, api_key="wrong")

    response = act(staff, "flush_cache", node)

    assert any("not flushed (HTTP 401" in message for message in said(response)), said(response)
    assert AuditEntry.objects.get(action="inference.flush_cache").details["ok"] is False


def test_test_generate_shows_the_nodes_answer(staff, keyed_worker):
    good = InferenceNode.objects.create(name="gpu1", base_url=keyed_worker.url, api_key=KEY)
    refused = InferenceNode.objects.create(
        name="gpu2", base_url=keyed_worker.url.replace("127.0.0.1", "localhost"), api_key="wrong"
    )

    messages = said(act(staff, "test_generate", good, refused))

    assert any(m.startswith("gpu1: answered in") and "tokens:" in m for m in messages), messages
    assert any(m.startswith("gpu2: failed") for m in messages), messages
    results = {e.target_repr: e.details["ok"] for e in AuditEntry.objects.filter(action="inference.test_generate")}
    assert results == {"gpu1": True, "gpu2": False}


def test_moderators_can_neither_see_nor_change_nodes():
    moderator = make_staff("mod@example.com")
    moderator.groups.add(Group.objects.get(name=MODERATOR_GROUP))
    client = signed_in(moderator)
    node = InferenceNode.objects.create(name="gpu1", base_url="http://127.0.0.1:9")

    assert client.get(reverse(CHANGELIST)).status_code == 403
    change = reverse("admin:inference_inferencenode_change", args=[node.pk])
    assert client.get(change).status_code == 403
    assert client.post(change, node_form(weight="1", enabled=None)).status_code == 403
    assert (
        client.post(reverse(CHANGELIST), {"action": "disable_nodes", ACTION_CHECKBOX_NAME: [node.pk]}).status_code
        == 403
    )
    assert client.post(reverse("admin:inference_inferencenode_add"), node_form(name="gpu9")).status_code == 403
    node.refresh_from_db()
    assert (node.enabled, node.weight) == (True, 100)
    assert not InferenceNode.objects.filter(name="gpu9").exists()
    assert not AuditEntry.objects.filter(action__startswith="inference.").exists()


def test_a_busy_node_keeps_its_cache_and_staff_are_told_why(staff, slow_worker):
    """SGLang flushes only an idle server (400 otherwise, with a body that reads like success)."""
    node = InferenceNode.objects.create(name="gpu1", base_url=slow_worker.url)
    body = {"text": "Tell me a long story.", "sampling_params": {"max_new_tokens": 1000}, "stream": True}
    with httpx.stream("POST", f"{slow_worker.url}/generate", json=body, timeout=30) as answer:
        lines = answer.iter_lines()  # kept: a dropped iterator closes the stream, and SGLang aborts the answer
        next(lines)  # the answer is being written
        messages = said(act(staff, "flush_cache", node))

    assert any(m.startswith("gpu1: cache not flushed") and "requests running or waiting" in m for m in messages), (
        messages
    )
    assert AuditEntry.objects.get(action="inference.flush_cache").details["ok"] is False

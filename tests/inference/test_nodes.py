"""The node registry and the poller: rows from INFERENCE_NODES, health thresholds, load samples."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from inference import environment, fleet, nodes, samples
from inference.health import poll_nodes
from inference.loads import EngineLoad
from inference.models import InferenceNode
from tests.support.engines import start_simulator

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh(settings):
    settings.INFERENCE_DOWN_AFTER, settings.INFERENCE_UP_AFTER = 2, 2
    environment.forget_sync()
    fleet.invalidate()
    yield
    environment.forget_sync()
    fleet.invalidate()


def test_environment_entries_are_names_and_urls_or_bare_urls():
    assert environment.parse_environment_nodes(["gpu1=http://10.0.0.1:30000", "http://gpu-2.lan:30000/"]) == [
        ("gpu1", "http://10.0.0.1:30000"), ("gpu-2-lan-30000", "http://gpu-2.lan:30000")]
    with pytest.raises(ImproperlyConfigured):
        environment.parse_environment_nodes(["gpu1=not a url"])


def test_inference_nodes_become_rows_once_and_follow_changes(settings):
    settings.INFERENCE_NODES = ["a=http://127.0.0.1:1", "b=http://127.0.0.1:2"]
    environment.sync_environment_nodes()
    environment.sync_environment_nodes()
    assert list(InferenceNode.objects.values_list("name", "base_url", "from_environment")) == [
        ("a", "http://127.0.0.1:1", True), ("b", "http://127.0.0.1:2", True)]
    settings.INFERENCE_NODES = ["a=http://127.0.0.1:3"]
    environment.sync_environment_nodes()
    assert InferenceNode.objects.get(name="a").base_url == "http://127.0.0.1:3"
    assert InferenceNode.objects.filter(name="b").exists()  # removed from the variable: left for staff


def test_without_rows_sglang_url_is_the_one_node(settings):
    settings.SGLANG_URL = "http://127.0.0.1:30999"
    [node] = fleet.snapshot()
    assert (node.name, node.base_url, node.routable) == ("default", "http://127.0.0.1:30999", True)


def test_the_snapshot_is_cached_until_invalidated(settings, django_assert_num_queries):
    settings.INFERENCE_FLEET_REFRESH_SECONDS = 60
    InferenceNode.objects.create(name="a", base_url="http://127.0.0.1:1")
    fleet.snapshot()
    with django_assert_num_queries(0):
        fleet.snapshot()
    nodes.drain(InferenceNode.objects.get(name="a"))
    assert fleet.snapshot()[0].draining and not fleet.snapshot()[0].routable


def test_a_stale_sample_is_no_sample(settings, monkeypatch):
    InferenceNode.objects.create(name="a", base_url="http://127.0.0.1:1")
    samples.record("a", EngineLoad(running_requests=3, waiting_requests=1, used_tokens=10))
    assert samples.fresh(["a"])["a"][0].running_requests == 3
    settings.INFERENCE_SAMPLE_MAX_AGE = -1
    assert samples.fresh(["a"]) == {}
    assert fleet.snapshot()[0].load is None


def test_a_node_goes_down_after_the_threshold_and_comes_back_after_its_own(settings):
    worker = start_simulator("--enable-metrics", "--accept-any-model")
    port = worker.url.rsplit(":", 1)[1]
    settings.INFERENCE_NODES = [f"gpu1={worker.url}"]
    try:
        assert poll_nodes() == 1
        node = InferenceNode.objects.get(name="gpu1")
        assert node.health == "up" and node.model_ids  # discovered from /v1/models
        [view] = fleet.snapshot()
        assert view.load is not None and view.load.source == "metrics" and view.load.token_usage is not None

        worker.kill()
        poll_nodes()
        assert InferenceNode.objects.get(name="gpu1").health == "up"  # one failure is not enough
        poll_nodes()
        down = InferenceNode.objects.get(name="gpu1")
        assert down.health == "down" and down.last_error and not fleet.snapshot()[0].routable
        assert fleet.snapshot()[0].load is None

        revived = start_simulator("--enable-metrics", "--accept-any-model", port=int(port))
        try:
            poll_nodes()
            assert InferenceNode.objects.get(name="gpu1").health == "down"  # one success is not enough
            poll_nodes()
            assert InferenceNode.objects.get(name="gpu1").health == "up" and fleet.snapshot()[0].routable
        finally:
            revived.stop()
    finally:
        worker.stop()

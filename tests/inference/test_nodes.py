"""The node registry and the poller: rows from INFERENCE_NODES, health thresholds, load samples."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from harness.engines import free_port, start_simulator
from inference import environment, fleet, nodes, samples
from inference.health import poll_nodes
from inference.loads import EngineLoad
from inference.models import InferenceNode
from tests.support.accounts import make_staff, signed_in

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
        ("gpu1", "http://10.0.0.1:30000"),
        ("gpu-2-lan-30000", "http://gpu-2.lan:30000"),
    ]
    with pytest.raises(ImproperlyConfigured):
        environment.parse_environment_nodes(["gpu1=not a url"])


def test_inference_nodes_become_rows_once_and_follow_changes(settings):
    settings.INFERENCE_NODES = ["a=http://127.0.0.1:1", "b=http://127.0.0.1:2"]
    environment.sync_environment_nodes()
    environment.sync_environment_nodes()
    assert list(InferenceNode.objects.values_list("name", "base_url", "from_environment")) == [
        ("a", "http://127.0.0.1:1", True),
        ("b", "http://127.0.0.1:2", True),
    ]
    settings.INFERENCE_NODES = ["a=http://127.0.0.1:3"]
    environment.sync_environment_nodes()
    assert InferenceNode.objects.get(name="a").base_url == "http://127.0.0.1:3"
    assert InferenceNode.objects.filter(name="b").exists()  # removed from the variable: left for staff


def test_without_rows_sglang_url_is_the_one_node(settings):
    settings.SGLANG_URL = "http://127.0.0.1:30999"
    [node] = fleet.snapshot()
    assert (node.name, node.base_url, node.routable) == ("default", "http://127.0.0.1:30999", True)


def test_the_sglang_url_node_is_judged_like_any_node(settings, engine):
    """The out-of-box engine's health was always "unknown": with it killed, users were told the model
    server is unavailable while the dashboard said "default · unknown · serving" (issue 24)."""
    settings.SGLANG_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert poll_nodes() == 0
    assert fleet.snapshot()[0].health == "unknown"  # one failure is not yet down (DOWN_AFTER is 2)
    poll_nodes()
    [node] = fleet.snapshot()
    assert (node.name, node.health, node.routable) == ("default", "down", False)
    staff = signed_in(make_staff("ops@example.com", is_superuser=True))
    page = staff.get(reverse("admin:inference_inferencenode_changelist")).content.decode()
    assert "default" in page and settings.SGLANG_URL in page and "down" in page

    settings.SGLANG_URL = engine.url  # another address: what was judged of the old one does not apply
    fleet.invalidate()
    assert fleet.snapshot()[0].health == "unknown"
    assert poll_nodes() == 1
    assert fleet.snapshot()[0].health == "up"  # never judged before: up at its first good check


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


def test_of_three_nodes_the_silent_one_goes_down_after_the_threshold_and_comes_back_after_its_own(settings):
    """Three workers on real ports: two with --enable-metrics (load from /metrics), one without (load
    from /v1/loads). The middle one is killed, judged down after INFERENCE_DOWN_AFTER failed checks
    while the others stay up with their loads, and is up again INFERENCE_UP_AFTER checks after it
    is back."""
    workers = {
        "gpu1": start_simulator("--enable-metrics", "--served-model-name", "sim-a"),
        "gpu2": start_simulator("--enable-metrics", "--served-model-name", "sim-b"),
        "gpu3": start_simulator("--served-model-name", "sim-c"),
    }
    settings.INFERENCE_NODES = [f"{name}={worker.url}" for name, worker in workers.items()]
    silent = workers["gpu2"]
    port = int(silent.url.rsplit(":", 1)[1])

    def health() -> dict[str, str]:
        return dict(InferenceNode.objects.values_list("name", "health"))

    def views() -> dict[str, fleet.NodeView]:
        fleet.invalidate()
        return {view.name: view for view in fleet.snapshot()}

    try:
        assert poll_nodes() == 3
        assert health() == {"gpu1": "up", "gpu2": "up", "gpu3": "up"}
        # Discovered from /v1/models.
        assert dict(InferenceNode.objects.values_list("name", "model_ids")) == {
            "gpu1": ["sim-a"],
            "gpu2": ["sim-b"],
            "gpu3": ["sim-c"],
        }
        assert {name: view.load.source for name, view in views().items()} == {
            "gpu1": "metrics",
            "gpu2": "metrics",
            "gpu3": "v1/loads",
        }
        assert views()["gpu1"].load.token_usage is not None

        silent.kill()
        assert poll_nodes() == 2
        assert health()["gpu2"] == "up"  # one failure is not enough
        assert poll_nodes() == 2
        assert health() == {"gpu1": "up", "gpu2": "down", "gpu3": "up"}
        after = views()
        assert not after["gpu2"].routable and after["gpu2"].load is None
        assert InferenceNode.objects.get(name="gpu2").last_error.startswith("/health")
        assert after["gpu1"].load is not None and after["gpu3"].load is not None

        revived = start_simulator("--enable-metrics", "--served-model-name", "sim-b", port=port)
        try:
            assert poll_nodes() == 3
            assert health()["gpu2"] == "down"  # one success is not enough
            poll_nodes()
            assert health() == {"gpu1": "up", "gpu2": "up", "gpu3": "up"}
            node = InferenceNode.objects.get(name="gpu2")
            assert node.last_error == "" and views()["gpu2"].routable and views()["gpu2"].load is not None
        finally:
            revived.stop()
    finally:
        for worker in workers.values():
            worker.stop()


def test_a_hung_node_that_still_accepts_connections_goes_down(settings):
    """The engine stops stepping (a stuck GPU) while its HTTP server still answers: SGLang's /health
    probe then gets no output and answers 503 (after SGLANG_HEALTH_CHECK_TIMEOUT, shortened here)."""
    worker = start_simulator("--fault-hang-after-tokens", "3", env={"SGLANG_HEALTH_CHECK_TIMEOUT": "1"})
    settings.INFERENCE_NODES = [f"gpu1={worker.url}"]
    body = {"text": "Tell me a story.", "sampling_params": {"max_new_tokens": 100}, "stream": True}
    try:
        assert poll_nodes() == 1
        with httpx.stream("POST", f"{worker.url}/generate", json=body, timeout=30) as answer:
            lines = answer.iter_lines()  # kept open: the engine hangs with this answer in it
            next(line for line in lines if '"completion_tokens":3' in line)
            assert poll_nodes() == 0
            assert InferenceNode.objects.get(name="gpu1").health == "up"
            assert poll_nodes() == 0
            node = InferenceNode.objects.get(name="gpu1")
            assert (node.health, node.last_error) == ("down", "/health answered 503")
            assert not fleet.snapshot()[0].routable
    finally:
        worker.stop()


class _NativeRoutesOnly(BaseHTTPRequestHandler):
    """A node that answers SGLang's native routes but refuses the OpenAI ones (as a proxy that passes
    only /health, /get_model_info and /get_load would), so the models must come from the model info."""

    routes = {
        "/health": (200, ""),
        "/get_model_info": (200, json.dumps({"model_path": "Qwen/Qwen2.5-7B-Instruct", "is_generation": True})),
        "/get_load": (200, json.dumps([{"dp_rank": 0, "num_reqs": 3, "num_waiting_reqs": 1, "num_tokens": 900}])),
    }

    def do_GET(self):
        status, body = self.routes.get(self.path, (404, '{"detail": "Not Found"}'))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def native_routes_node():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NativeRoutesOnly)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_models_come_from_the_model_info_when_v1_models_is_not_served(settings, native_routes_node):
    settings.INFERENCE_NODES = [f"old={native_routes_node}"]

    assert poll_nodes() == 1

    node = InferenceNode.objects.get(name="old")
    assert (node.health, node.model_ids) == ("up", ["Qwen/Qwen2.5-7B-Instruct"])
    load = fleet.snapshot()[0].load
    assert (load.source, load.running_requests, load.waiting_requests) == ("get_load", 2, 1)

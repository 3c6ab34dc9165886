"""What a model can do comes from its engines: the poller reads SGLang's /model_info and /server_info,
`GET /v1/models` shows it, and a request that needs what its model cannot do is a 400 naming the
parameter, before any quota is held."""

from __future__ import annotations

import httpx
import pytest
from django.urls import reverse

from accounts.api_keys import create_api_key
from api import completions
from api.requests import parse
from billing.quota_store import get_store
from billing.selectors import current_period
from config.refusals import BadInput
from harness.engines import start_simulator
from inference import capabilities, environment, fleet
from inference.health import poll_nodes
from inference.models import InferenceNode
from tests.support.accounts import make_staff, signed_in
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_what_sglang_reports_is_what_the_node_can_do():
    qwen = {
        "is_generation": True,
        "tool_call_parser": "qwen25",
        "has_image_understanding": False,
        "weight_version": "2026-11-30",
    }
    assert capabilities.from_engine(qwen, {"grammar_backend": "xgrammar"}) == {
        "tools": True,
        "json_schema": True,
        "embeddings": False,
        "images": False,
        "weight_version": "2026-11-30",
    }
    bare = {"is_generation": True, "tool_call_parser": None, "has_image_understanding": True}
    assert capabilities.from_engine(bare, {"grammar_backend": "none"}) == {
        "tools": False,
        "json_schema": False,
        "embeddings": False,
        "images": True,
        "weight_version": "",
    }
    # An older server without /server_info: SGLang's default grammar backend.
    assert capabilities.from_engine(bare, None)["json_schema"] is True
    assert capabilities.from_engine({"is_generation": False}, None)["embeddings"] is True


@pytest.fixture
def plain_fleet(settings):
    """One node that runs no tool-call parser and no grammar backend, serving sim-small."""
    with start_simulator("--accept-any-model", "--grammar-backend", "none", tool_call_parser=None) as worker:
        settings.INFERENCE_NODES = [f"plain={worker.url}"]
        environment.forget_sync()
        fleet.invalidate()
        yield worker
    environment.forget_sync()
    fleet.invalidate()


def test_the_poller_learns_a_nodes_capabilities_and_requests_needing_others_are_refused(plain_fleet, user):
    assert capabilities.of_model("sim-small")["tools"] is None  # not asked yet: the engine decides
    poll_nodes()
    fleet.invalidate()
    node = InferenceNode.objects.get(name="plain")
    assert node.capabilities == {
        "tools": False,
        "json_schema": False,
        "embeddings": False,
        "images": False,
        "weight_version": "default",
    }
    # Staff see it on the node's page.
    staff = signed_in(make_staff("root@example.com", is_superuser=True))
    page = staff.get(reverse("admin:inference_inferencenode_change", args=[node.pk]))
    assert "plain text only" in page.content.decode()

    put_on_plan(user, "pro")
    key, _ = create_api_key(user, "capabilities")
    asks = {
        "tools": {"tools": [WEATHER]},
        "response_format": {"response_format": {"type": "json_object"}},
        "regex": {"regex": "[a-z]+"},
    }
    for param, fields in asks.items():
        with pytest.raises(BadInput) as refused:
            completions.start(
                key,
                parse({"model": "sim-small", "messages": [{"role": "user", "content": "hi"}], **fields}),
                None,
                None,
            )
        assert refused.value.details["param"] == param
        assert "sim-small" in refused.value.message
    # Refused before anything was held.
    _, held = get_store().snapshot(user.pk, current_period(user).period.key)
    assert held == 0


def test_v1_models_says_what_each_model_can_do(settings, user):
    with start_simulator("--accept-any-model") as worker:  # the harness runs it with the qwen parser
        settings.INFERENCE_NODES = [f"tools={worker.url}"]
        environment.forget_sync()
        poll_nodes()
        server = start_daphne(engine_url=worker.url, extra_env={"INFERENCE_NODES": f"tools={worker.url}"})
        try:
            put_on_plan(user, "pro")
            _, raw = create_api_key(user, "models")
            listed = httpx.get(
                server.base_url + "/v1/models", headers={"Authorization": f"Bearer {raw}"}, timeout=30
            ).json()["data"]
        finally:
            server.stop()
            environment.forget_sync()
            fleet.invalidate()
    small = next(model for model in listed if model["id"] == "sim-small")
    assert small["capabilities"] == {"tools": True, "json_schema": True, "embeddings": False, "images": False}


def test_a_server_without_a_grammar_backend_refuses_grammars_as_sglang_does():
    with start_simulator("--grammar-backend", "none") as worker:
        info = httpx.get(worker.url + "/server_info").json()
        refused = httpx.post(
            worker.url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "regex": "[a-z]+"},
            timeout=30,
        )
    assert info["grammar_backend"] == "none"
    assert refused.status_code == 400
    assert "--grammar-backend none" in refused.json()["message"]


def test_an_embedding_model_is_known_to_embed_and_never_to_call_tools(settings):
    settings.INFERENCE_EMBEDDING_MODELS = ["sim-embed=Simulated Embeddings"]
    fleet.invalidate()
    assert capabilities.of_model("sim-embed") == {
        "tools": False,
        "json_schema": False,
        "embeddings": True,
        "images": None,
    }
    assert capabilities.of_model("sim-small")["embeddings"] is False

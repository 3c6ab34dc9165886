"""Routing rules, in process: which node a generation goes to, for each policy."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

import pytest

from inference import routing
from inference.fleet import NodeView
from inference.loads import EngineLoad
from tests.inference.helpers import node_view


def node(
    name: str,
    *,
    models=("sim-small",),
    group="default",
    weight=100,
    enabled=True,
    draining=False,
    health="up",
    waiting=0,
    running=0,
    usage=0.1,
) -> NodeView:
    load = EngineLoad(running_requests=running, waiting_requests=waiting, used_tokens=0, token_usage=usage)
    return node_view(
        name,
        models=models,
        group=group,
        weight=weight,
        enabled=enabled,
        draining=draining,
        health=health,
        load=load,
    )


@pytest.fixture(autouse=True)
def _fresh_router(settings):
    settings.REDIS_URL = ""  # the warm-conversation memory in this process, not shared Redis
    settings.INFERENCE_ROUTING = "affinity"
    routing._warm.clear()
    routing._suspects.clear()
    routing._sent.clear()
    yield
    routing._warm.clear()
    routing._suspects.clear()
    routing._sent.clear()


@pytest.fixture(autouse=True)
def _no_rollouts(monkeypatch):
    monkeypatch.setattr("inference.rollout.all_routes", lambda: {})


THREE = [node("a"), node("b"), node("c")]


def test_a_conversation_always_lands_on_the_same_node():
    picks = {routing.choose_node("sim-small", "conversation-42", nodes=THREE).node.name for _ in range(20)}
    assert len(picks) == 1


def test_conversations_spread_over_the_nodes_by_weight():
    nodes = [node("a", weight=100), node("b", weight=100), node("c", weight=200)]
    counts = Counter(routing.rendezvous(f"c{i}", nodes, routing._weights(nodes, None)).name for i in range(4000))
    # Expected shares 1/4, 1/4, 1/2: a hash, so allow for its spread (4000 draws: sd ~ 1.6%).
    assert abs(counts["a"] / 4000 - 0.25) < 0.04
    assert abs(counts["c"] / 4000 - 0.50) < 0.04


def test_removing_a_node_moves_only_its_own_conversations():
    keys = [f"conversation-{i}" for i in range(500)]
    weights = routing._weights(THREE, None)
    before = {key: routing.rendezvous(key, THREE, weights).name for key in keys}
    two = [n for n in THREE if n.name != "c"]
    after = {key: routing.rendezvous(key, two, routing._weights(two, None)).name for key in keys}
    moved = {key for key in keys if before[key] != after[key]}
    assert moved == {key for key in keys if before[key] == "c"}


def test_down_disabled_and_draining_nodes_take_no_new_requests():
    nodes = [node("a", health="down"), node("b", enabled=False), node("c", draining=True), node("d")]
    assert {routing.choose_node("sim-small", f"k{i}", nodes=nodes).node.name for i in range(30)} == {"d"}


def test_nodes_of_unknown_health_serve_before_the_first_poll():
    assert routing.choose_node("sim-small", "k", nodes=[node("a", health="unknown")]).node.name == "a"


def test_no_node_for_the_model_is_a_busy_refusal_with_retry_after():
    with pytest.raises(routing.NoNodeAvailable) as refused:
        routing.choose_node("sim-small", "k", nodes=[node("a", health="down")])
    assert refused.value.status == 503 and refused.value.retry_after


def test_only_nodes_that_serve_the_model_are_chosen():
    nodes = [node("small", models=("sim-small",)), node("large", models=("sim-large",))]
    assert {routing.choose_node("sim-large", f"k{i}", nodes=nodes).node.name for i in range(20)} == {"large"}


def test_a_busy_preferred_node_is_passed_over_for_the_least_loaded():
    preferred = routing.choose_node("sim-small", "conversation-7", nodes=THREE).node.name
    routing._warm.clear()
    second, third = (n.name for n in THREE if n.name != preferred)
    loaded = [node(preferred, waiting=50), node(second, waiting=2), node(third, waiting=1)]
    assert routing.choose_node("sim-small", "conversation-7", nodes=loaded).node.name == third


def test_a_warm_conversation_stays_where_it_was_when_nodes_change():
    first = routing.choose_node("sim-small", "conversation-9", nodes=THREE).node.name
    others = [n for n in THREE if n.name != first]
    # A new node that would win the hash for this key does not take a warm conversation away.
    newcomers = [node(f"new{i}") for i in range(40)]
    assert routing.choose_node("sim-small", "conversation-9", nodes=[*THREE, *newcomers]).node.name == first
    assert routing.choose_node("sim-small", "conversation-9", nodes=others).node.name != first


def test_least_loaded_counts_requests_sent_since_the_last_sample():
    nodes = [node("a"), node("b")]
    sent = [routing.sending("a"), routing.sending("a")]
    assert routing.choose_node("sim-small", None, nodes=nodes, policy="least_loaded").node.name == "b"
    for token in sent:
        routing.finished("a", token)
    assert routing.choose_node("sim-small", None, nodes=nodes, policy="least_loaded").node.name == "a"


def test_requests_already_in_the_load_sample_are_not_counted_twice():
    sent = [routing.sending("a") for _ in range(4)]
    # Both samples are newer than those four requests: a's four running are in its sample already.
    a = dataclasses.replace(node("a", running=4), sampled_at=time.time() + 1)
    b = dataclasses.replace(node("b", running=6), sampled_at=time.time() + 1)
    try:
        assert routing.choose_node("sim-small", None, nodes=[a, b], policy="least_loaded").node.name == "a"
    finally:
        for token in sent:
            routing.finished("a", token)


def test_round_robin_takes_each_node_in_turn():
    picks = [routing.choose_node("sim-small", "same", nodes=THREE, policy="round_robin").node.name for _ in range(6)]
    assert Counter(picks) == {"a": 2, "b": 2, "c": 2}


def test_a_node_that_just_failed_is_avoided_while_others_can_serve():
    routing.suspect("a")
    nodes = [node("a"), node("b")]
    assert {routing.choose_node("sim-small", f"k{i}", nodes=nodes).node.name for i in range(20)} == {"b"}
    # ... and used when it is the only one left.
    assert routing.choose_node("sim-small", "k", nodes=[node("a")]).node.name == "a"


def test_excluded_nodes_are_not_chosen():
    assert routing.choose_node("sim-small", "k", nodes=THREE, exclude=["a", "b"]).node.name == "c"


def test_gateway_mode_sends_everything_to_the_gateway(settings):
    settings.INFERENCE_GATEWAY_URL = "http://smg:30000"
    route = routing.choose_node("sim-small", "k", nodes=THREE, policy="gateway")
    assert route.via_gateway and route.node.base_url == "http://smg:30000"


class TestPressure:
    def test_levels_follow_the_engine_queue_and_kv_usage(self, settings):
        settings.ENGINE_SOFT_QUEUED_REQUESTS, settings.ENGINE_HARD_QUEUED_REQUESTS = 4, 16
        settings.ENGINE_SOFT_TOKEN_USAGE, settings.ENGINE_HARD_TOKEN_USAGE = 0.8, 0.95
        assert routing.pressure(node("a", waiting=3).load) == routing.OK
        assert routing.pressure(node("a", waiting=4).load) == routing.SOFT
        assert routing.pressure(node("a", usage=0.9).load) == routing.SOFT
        assert routing.pressure(node("a", waiting=16).load) == routing.HARD
        assert routing.pressure(node("a", usage=0.96).load) == routing.HARD
        assert routing.pressure(None) is None

    def test_a_model_is_as_busy_as_its_least_busy_node(self, settings):
        settings.ENGINE_SOFT_QUEUED_REQUESTS, settings.ENGINE_HARD_QUEUED_REQUESTS = 4, 16
        nodes = [node("a", waiting=20), node("b", waiting=5)]
        assert routing.model_pressure("sim-small", nodes) == routing.SOFT
        assert routing.model_pressure("sim-small", [*nodes, node("c", waiting=0)]) == routing.OK

    def test_stale_samples_do_not_count_as_idle(self):
        stale = node_view("a", load=None)
        assert routing.model_pressure("sim-small", [stale]) is None
        assert routing.model_pressure("sim-small", [stale, node("b", waiting=40)]) == routing.HARD


class TestRollout:
    def test_traffic_splits_between_node_groups_by_weight(self, monkeypatch):
        monkeypatch.setattr("inference.rollout.all_routes", lambda: {"sim-small": {"v1": 90, "v2": 10}})
        nodes = [node("old1", group="v1"), node("old2", group="v1"), node("new1", group="v2", models=("sim-small-v2",))]
        picks = Counter(routing.choose_node("sim-small", f"c{i}", nodes=nodes).node.group for i in range(2000))
        assert abs(picks["v2"] / 2000 - 0.10) < 0.03

    def test_the_new_version_is_asked_for_by_its_own_name(self, monkeypatch):
        monkeypatch.setattr("inference.rollout.all_routes", lambda: {"sim-small": {"v2": 100}})
        route = routing.choose_node("sim-small", "k", nodes=[node("new1", group="v2", models=("sim-small-v2",))])
        assert route.engine_model == "sim-small-v2"

    def test_a_warm_conversation_keeps_its_version_while_weights_move(self, monkeypatch):
        nodes = [node("old1", group="v1"), node("new1", group="v2")]
        monkeypatch.setattr("inference.rollout.all_routes", lambda: {"sim-small": {"v1": 100, "v2": 0}})
        keys = [f"c{i}" for i in range(50)]
        assert {routing.choose_node("sim-small", k, nodes=nodes).node.group for k in keys} == {"v1"}
        monkeypatch.setattr("inference.rollout.all_routes", lambda: {"sim-small": {"v1": 50, "v2": 50}})
        assert {routing.choose_node("sim-small", k, nodes=nodes).node.group for k in keys} == {"v1"}
        fresh = Counter(routing.choose_node("sim-small", f"new{i}", nodes=nodes).node.group for i in range(200))
        assert fresh["v2"] > 50

    def test_rolling_back_to_zero_moves_even_warm_conversations(self, monkeypatch):
        nodes = [node("old1", group="v1"), node("new1", group="v2")]
        monkeypatch.setattr("inference.rollout.all_routes", lambda: {"sim-small": {"v1": 0, "v2": 100}})
        assert routing.choose_node("sim-small", "c1", nodes=nodes).node.group == "v2"
        monkeypatch.setattr("inference.rollout.all_routes", lambda: {"sim-small": {"v1": 100, "v2": 0}})
        assert routing.choose_node("sim-small", "c1", nodes=nodes).node.group == "v1"


def test_a_model_no_node_lists_goes_to_every_node_by_the_name_each_serves():
    # SGLang answers whatever model name it is asked; a node lists only its --served-model-name.
    nodes = [node("a", models=("qwen2.5-7b",)), node("b", models=("qwen2.5-7b",))]
    route = routing.choose_node("Qwen/Qwen2.5-7B-Instruct", "k", nodes=nodes)
    assert route.node.name in {"a", "b"} and route.engine_model == "qwen2.5-7b"


def test_nodes_that_list_the_model_are_preferred_over_those_that_do_not():
    nodes = [node("small", models=("sim-small",)), node("large", models=("sim-large",))]
    assert {routing.choose_node("sim-large", f"k{i}", nodes=nodes).node.name for i in range(20)} == {"large"}


class TestEmbeddingModels:
    @pytest.fixture(autouse=True)
    def _catalogue(self, settings):
        settings.INFERENCE_EMBEDDING_MODELS = ["sim-embed=Simulated Embeddings"]
        settings.SGLANG_EMBEDDING_URL = ""

    def test_an_embedding_model_goes_only_to_a_node_that_lists_it(self):
        nodes = [node("chat-1"), node("chat-2", models=()), node("embed-1", models=("sim-embed",))]
        assert {routing.choose_node("sim-embed", f"k{i}", nodes=nodes).node.name for i in range(30)} == {"embed-1"}

    def test_a_chat_never_goes_to_an_embedding_node(self):
        nodes = [node("chat-1", models=()), node("embed-1", models=("sim-embed",))]
        # sim-large is listed by no node: every chat-capable node may serve it, the embedding node never.
        assert {routing.choose_node("sim-large", f"k{i}", nodes=nodes).node.name for i in range(30)} == {"chat-1"}

    def test_no_node_for_the_embedding_model_is_busy_unless_the_embedding_url_is_set(self, settings):
        nodes = [node("chat-1", models=())]
        with pytest.raises(routing.NoNodeAvailable):
            routing.choose_node("sim-embed", nodes=nodes)
        settings.SGLANG_EMBEDDING_URL = "http://127.0.0.1:30001"
        route = routing.choose_node("sim-embed", nodes=nodes)
        assert (route.node.name, route.node.base_url, route.engine_model) == (
            "default-embedding",
            "http://127.0.0.1:30001",
            "sim-embed",
        )
        # A listed node is preferred to the fallback.
        listed = routing.choose_node("sim-embed", nodes=[*nodes, node("embed-1", models=("sim-embed",))])
        assert listed.node.name == "embed-1"

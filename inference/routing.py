"""Which engine serves a generation: one decision, made the same way for the web chat and the API.

`choose_node(model_id, key)` picks among the nodes of `inference.fleet.snapshot()` (no database
query on the path of a message; the snapshot is cached per process) that are enabled, not draining,
not down, and serve the model (or, during a rollout, belong to one of its node groups). Embedding
models (INFERENCE_EMBEDDING_MODELS) go only to nodes that list them, else to SGLANG_EMBEDDING_URL;
chat models never go to a node that lists an embedding model. Policies
(INFERENCE_ROUTING):

- ``affinity`` (default): weighted rendezvous hashing of the conversation key over those nodes, so
  every turn of a conversation lands on the node whose RadixAttention cache already holds its prefix,
  and adding or removing a node moves only the conversations that hashed to it. A node past the soft
  load threshold is passed over for the least loaded one. The node a conversation used is remembered
  for ROUTING_WARM_SECONDS: while its cache is warm the conversation stays there (and on its model
  version during a rollout) even when weights change.
- ``least_loaded``: the node with the fewest running and queued requests (its last load sample plus
  what this process sent it since).
- ``round_robin``: each node in turn (for comparison; it spreads every conversation's prefix over
  every node).
- ``gateway``: everything goes to the SGLang Model Gateway (INFERENCE_GATEWAY_URL), with the key in
  ``X-SMG-Routing-Key``; the gateway routes across its workers.

A node that failed a request in this process is avoided for a few seconds, until the poller has
had time to judge its health.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.utils.translation import gettext_lazy

from config.redis import sync_client
from config.refusals import Busy
from inference import rollout
from inference.catalogue import embedding_model_ids
from inference.fleet import NodeView, embedding_default_node, snapshot
from inference.loads import EngineLoad

OK, SOFT, HARD = 0, 1, 2
WARM_KEY = "sglchat:warm:{model}:{key}"
#: Said where it is refused: a send's refusal in the person's language; the API's in English.
NO_NODE = gettext_lazy("No model server for this model is available right now. Retrying shortly.")
#: Staff asked for one version of a model (an evaluation) where the gateway, not the product, routes.
NO_GROUP_BEHIND_GATEWAY = (
    "Behind the SGLang Model Gateway the gateway chooses the worker: one version of a model cannot be asked "
    "for by its node group. Evaluate it with INFERENCE_ROUTING set to the product's own routing."
)
#: Seconds a node that just failed a request is avoided by this process.
SUSPECT_SECONDS = 5.0


class NoNodeAvailable(Busy):
    """Every node that could serve the model is down, disabled, draining or just failed."""


@dataclass(frozen=True)
class Route:
    node: NodeView
    #: The model name the node knows the model by (a rollout's new version may have its own name).
    engine_model: str
    #: The request goes through the SGLang Model Gateway (no /abort_request there).
    via_gateway: bool = False
    #: Why this node, in a trace's words: "only node", "round robin", "least loaded", "warm" (the node
    #: that has the conversation's prefix), "preferred" (the key's own node), "fallback" (the key's node
    #: was busy: the least loaded instead), "gateway".
    how: str = ""


def pressure(load: EngineLoad | None) -> int | None:
    """How busy one engine is: OK, SOFT (past the soft threshold), HARD, or None when not known.

    The thresholds are the engine's own queue and KV-cache figures (ENGINE_*), so "busy" means the
    GPU is busy, whatever the web tier believes."""
    if load is None:
        return None
    usage = load.token_usage or 0.0
    if load.waiting_requests >= settings.ENGINE_HARD_QUEUED_REQUESTS or usage >= settings.ENGINE_HARD_TOKEN_USAGE:
        return HARD
    if load.waiting_requests >= settings.ENGINE_SOFT_QUEUED_REQUESTS or usage >= settings.ENGINE_SOFT_TOKEN_USAGE:
        return SOFT
    return OK


def model_pressure(model_id: str, nodes: Sequence[NodeView] | None = None) -> int | None:
    """How busy the engines that could serve `model_id` are: the least busy of them (the router would
    send the request there), or None when no candidate has a fresh load sample."""
    levels = [level for node in _candidates(model_id, nodes) if (level := pressure(node.load)) is not None]
    return min(levels) if levels else None


# Requests this process sent to each node and has not seen end, with when each was sent: the load
# samples are seconds old, and without these a burst would all go to whichever node looked idle at the
# last poll. Only those sent after a node's sample are added to it (earlier ones are in the sample).
_sent: dict[str, dict[int, float]] = {}
_tokens = itertools.count()
_suspects: dict[str, float] = {}
_turns = itertools.count()
_lock = threading.Lock()
_warm: dict[str, tuple[str, float]] = {}


def sending(node: str) -> int:
    """A request goes to `node` now; returns the token to give `finished` when it ends."""
    token = next(_tokens)
    with _lock:
        _sent.setdefault(node, {})[token] = time.time()
    return token


def finished(node: str, token: int) -> None:
    with _lock:
        in_flight = _sent.get(node)
        if in_flight is not None:
            in_flight.pop(token, None)
            if not in_flight:
                del _sent[node]


def _sent_since(node: NodeView) -> int:
    with _lock:
        times = list(_sent.get(node.name, {}).values())
    if node.load is None or node.sampled_at is None:
        return len(times)
    return sum(1 for sent_at in times if sent_at > node.sampled_at)


def suspect(node: str) -> None:
    """`node` just failed a request here: avoid it for SUSPECT_SECONDS (if there is anywhere else to go)."""
    with _lock:
        _suspects[node] = time.monotonic() + SUSPECT_SECONDS


def _is_suspect(name: str, now: float) -> bool:
    until = _suspects.get(name)
    if until is None:
        return False
    if until <= now:
        _suspects.pop(name, None)
        return False
    return True


def serving_nodes(model_id: str) -> list[NodeView]:
    """The routable nodes a request for `model_id` may go to now (none in gateway mode: smg chooses)."""
    if settings.INFERENCE_ROUTING == "gateway":
        return []
    return _candidates(model_id)


def _candidates(
    model_id: str, nodes: Sequence[NodeView] | None = None, exclude: Iterable[str] = (), group: str | None = None
) -> list[NodeView]:
    """The routable nodes for `model_id`: during a rollout, those of its node groups with weight; else
    those that list it, or, when none does, every one (SGLang answers whatever model name it is asked,
    and a node lists only its --served-model-name, which need not be the id users see). With `group`
    (one version of the model, asked for by name: an evaluation), that group's nodes whatever its weight."""
    nodes = snapshot() if nodes is None else nodes
    groups = rollout.group_weights(model_id)
    if group is not None:
        groups = {group: 1}
    excluded = set(exclude)
    usable = [n for n in nodes if n.routable and n.name not in excluded]
    embedding = embedding_model_ids()
    if model_id in embedding:
        # An embedding model runs only where it is listed (a generation server refuses embeddings),
        # else on SGLANG_EMBEDDING_URL when that is set.
        if groups is not None:
            return [n for n in usable if groups.get(n.group, 0) > 0]
        listing = [n for n in usable if model_id in n.models]
        fallback = embedding_default_node()
        if not listing and fallback is not None and fallback.name not in excluded:
            return [fallback]
        return listing
    # A chat never goes to a node that serves an embedding model (it cannot generate).
    usable = [n for n in usable if not embedding.intersection(n.models)]
    if groups is not None:
        return [n for n in usable if groups.get(n.group, 0) > 0]
    listing = [n for n in usable if model_id in n.models]
    return listing or usable


def _weights(nodes: Sequence[NodeView], groups: dict[str, int] | None) -> dict[str, float]:
    """Each node's share: its weight within its group, times its group's weight in a rollout."""
    if groups is None:
        return {n.name: float(max(n.weight, 1)) for n in nodes}
    group_totals: Counter[str] = Counter()
    for n in nodes:
        group_totals[n.group] += max(n.weight, 1)
    return {n.name: groups[n.group] * max(n.weight, 1) / group_totals[n.group] for n in nodes}


def _unit(key: str, name: str) -> float:
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


def rendezvous(key: str, nodes: Sequence[NodeView], weights: dict[str, float]) -> NodeView:
    """The node with the highest weighted rendezvous score for `key` (stable as nodes come and go)."""
    return max(nodes, key=lambda n: weights[n.name] / -math.log(_unit(key, n.name)))


def _load_score(node: NodeView) -> tuple[float, float]:
    load = node.load
    queued = (load.total_requests if load is not None else 0) + _sent_since(node)
    return (queued / max(node.weight, 1), load.token_usage or 0.0 if load is not None else 0.0)


def least_loaded(nodes: Sequence[NodeView]) -> NodeView:
    return min(nodes, key=_load_score)


def _engine_model(node: NodeView, model_id: str) -> str:
    if model_id in node.models or not node.models:
        return model_id
    return node.models[0]


def _gateway_route(model_id: str) -> Route:
    url = settings.INFERENCE_GATEWAY_URL or settings.SGLANG_URL
    node = NodeView(
        name="gateway",
        base_url=url,
        api_key=settings.SGLANG_API_KEY,
        models=(),
        group="default",
        weight=1,
        enabled=True,
        draining=False,
        health="unknown",
        load=None,
    )
    return Route(node=node, engine_model=model_id, via_gateway=True, how="gateway")


def _remembered(model_id: str, key: str) -> str | None:
    client = sync_client()
    name = WARM_KEY.format(model=model_id, key=key)
    if client is not None:
        return client.get(name)
    with _lock:
        entry = _warm.get(name)
    return entry[0] if entry is not None and entry[1] > time.monotonic() else None


def _remember(model_id: str, key: str, node: str) -> None:
    client = sync_client()
    name = WARM_KEY.format(model=model_id, key=key)
    if client is not None:
        client.set(name, node, ex=settings.ROUTING_WARM_SECONDS)
        return
    with _lock:
        _warm[name] = (node, time.monotonic() + settings.ROUTING_WARM_SECONDS)


def _affinity(
    model_id: str, key: str | None, nodes: list[NodeView], groups: dict[str, int] | None
) -> tuple[NodeView, str]:
    if key is None:
        return least_loaded(nodes), "least loaded"
    remembered = _remembered(model_id, key)
    warm = next((n for n in nodes if n.name == remembered), None)
    if warm is not None and (pressure(warm.load) or OK) < SOFT:
        chosen, how = warm, "warm"
    else:
        preferred = rendezvous(key, nodes, _weights(nodes, groups))
        if (pressure(preferred.load) or OK) < SOFT:
            chosen, how = preferred, "preferred"
        else:
            chosen, how = least_loaded(nodes), "fallback"
    if chosen.name != remembered:
        _remember(model_id, key, chosen.name)
    return chosen, how


def choose_node(
    model_id: str,
    key: str | None = None,
    *,
    exclude: Iterable[str] = (),
    policy: str | None = None,
    nodes: Sequence[NodeView] | None = None,
    group: str | None = None,
) -> Route:
    """The node for one generation of `model_id`; `key` keeps a conversation's turns together.
    `exclude` names nodes not to use (a retry after a failure); `group` asks for one version of the
    model (its node group), whatever the rollout's weights. Raises NoNodeAvailable."""
    policy = policy or settings.INFERENCE_ROUTING
    if policy == "gateway":
        if group is not None:
            raise NoNodeAvailable(NO_GROUP_BEHIND_GATEWAY, retry_after=60)
        return _gateway_route(model_id)
    candidates = _candidates(model_id, nodes, exclude, group)
    now = time.monotonic()
    healthy = [n for n in candidates if not _is_suspect(n.name, now)] or candidates
    if not healthy:
        raise NoNodeAvailable(NO_NODE, retry_after=5)
    groups = rollout.group_weights(model_id) if group is None else {group: 1}
    if len(healthy) == 1 and groups is None:
        chosen, how = healthy[0], "only node"  # one engine: nothing to decide, and nothing to remember
    elif policy == "round_robin":
        chosen, how = healthy[next(_turns) % len(healthy)], "round robin"
    elif policy == "least_loaded":
        chosen, how = least_loaded(healthy), "least loaded"
    else:
        # During a rollout the conversation is remembered even with one group live, so it keeps
        # its version when the other group's weight rises.
        chosen, how = _affinity(model_id, key, healthy, groups)
    return Route(node=chosen, engine_model=_engine_model(chosen, model_id), how=how)


def route_to(node_name: str, model_id: str) -> Route | None:
    """The route to the node called `node_name` (the one that served a generation), whatever its
    health or load; None when the fleet no longer has it. "gateway" is the SGLang Model Gateway."""
    if node_name == "gateway":
        return _gateway_route(model_id)
    node = next((n for n in snapshot() if n.name == node_name), None)
    return Route(node=node, engine_model=_engine_model(node, model_id)) if node is not None else None

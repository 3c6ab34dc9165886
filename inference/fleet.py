"""What the router and admission read about the nodes: a snapshot, never the database per message.

`snapshot()` is the nodes' rows (one query) with their fresh load samples (one Redis MGET; with no
rows, one GET more for what the poller judged of SGLANG_URL's node), cached
in this process for INFERENCE_FLEET_REFRESH_SECONDS, so a change in the admin or a node going down
reaches every process within about a second, and a message pays for neither lookup. With no rows
(and no INFERENCE_NODES), SGLANG_URL is the one node, named "default", as in a single-engine setup,
with the health the poller judged of it (kept in inference.samples, as it has no row).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from django.conf import settings

from inference import samples
from inference.environment import sync_environment_nodes
from inference.freshness import Fresh
from inference.loads import EngineLoad
from inference.models import InferenceNode

DEFAULT_NODE = "default"
#: The name of SGLANG_EMBEDDING_URL's server when it serves an embedding model no node lists.
EMBEDDING_DEFAULT_NODE = "default-embedding"


@dataclass(frozen=True)
class NodeView:
    name: str
    base_url: str
    api_key: str
    models: tuple[str, ...]
    group: str
    weight: int
    enabled: bool
    draining: bool
    #: "up", "down" or "unknown" (not polled yet).
    health: str
    #: None when there is no sample, or it is stale.
    load: EngineLoad | None
    #: When the load sample was taken (unix time), if there is one.
    sampled_at: float | None = None
    #: What its engine said it can do (inference.capabilities); empty until the poller has asked.
    capabilities: dict = dataclasses.field(default_factory=dict)

    @property
    def routable(self) -> bool:
        """May take new requests: enabled, not draining, not known to be down."""
        return self.enabled and not self.draining and self.health != InferenceNode.Health.DOWN


def _configured_node(name: str, url: str) -> NodeView:
    """A node named by a setting rather than a row: it serves whatever it is asked; its health is what the
    poller judged of it lately (set by `_read`), else unknown."""
    return NodeView(
        name=name,
        base_url=url,
        api_key=settings.SGLANG_API_KEY,
        models=(),
        group="default",
        weight=100,
        enabled=True,
        draining=False,
        health="unknown",
        load=None,
    )


def default_node() -> NodeView:
    return _configured_node(DEFAULT_NODE, settings.SGLANG_URL)


def embedding_default_node() -> NodeView | None:
    """SGLANG_EMBEDDING_URL as a node serving every embedding model, or None when it is not set. Not part
    of the snapshot (the poller does not watch it): the router falls back to it for an embedding model
    that no node lists (inference.routing)."""
    if not settings.SGLANG_EMBEDDING_URL:
        return None
    return _configured_node(EMBEDDING_DEFAULT_NODE, settings.SGLANG_EMBEDDING_URL)


def _read() -> list[NodeView]:
    sync_environment_nodes()
    rows = list(
        InferenceNode.objects.values_list(
            "name",
            "base_url",
            "api_key",
            "model_ids",
            "group",
            "weight",
            "enabled",
            "draining",
            "health",
            "capabilities",
        )
    )
    if not rows:
        node = default_node()
        state = samples.judged(node.name, node.base_url)
        if state is not None:
            node = dataclasses.replace(node, health=state["health"])
        sample = samples.fresh([node.name]).get(node.name)
        if sample is None:
            return [node]
        return [dataclasses.replace(node, load=sample[0], sampled_at=sample[1])]
    loads = samples.fresh(row[0] for row in rows)
    views = []
    for name, url, key, model_ids, group, weight, enabled, draining, health, capabilities in rows:
        load, at = loads.get(name, (None, None))
        views.append(
            NodeView(
                name=name,
                base_url=url,
                api_key=key,
                models=tuple(model_ids or ()),
                group=group,
                weight=weight,
                enabled=enabled,
                draining=draining,
                health=health,
                load=load,
                sampled_at=at,
                capabilities=capabilities or {},
            )
        )
    return views


_snapshot: Fresh[list[NodeView]] = Fresh(_read)


def snapshot() -> list[NodeView]:
    """Every node with its health and fresh load (synchronous; cached per process)."""
    return _snapshot.get()


def invalidate() -> None:
    """Read the nodes again on the next snapshot (after an admin change, and in tests)."""
    _snapshot.invalidate()

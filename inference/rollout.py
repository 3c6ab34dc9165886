"""Model rollouts: a model name users see, served by one or more node groups with weights.

With no `ModelRoute` rows for a model, every node that lists the model serves it. With rows, the
model's traffic is split between the named node groups by weight (blue-green: 100/0, then 90/10,
... 0/100, and back), and the router keeps each warm conversation where it was (inference.routing),
so a conversation does not change version mid-way while its cache is warm.

Read on the path of every message, so the rows are cached per process for
INFERENCE_FLEET_REFRESH_SECONDS (the same freshness as the node snapshot).
"""

from __future__ import annotations

from inference.freshness import Fresh
from inference.models import ModelRoute


def _load() -> dict[str, dict[str, int]]:
    routes: dict[str, dict[str, int]] = {}
    for model_id, group, weight in ModelRoute.objects.values_list("model", "group", "weight"):
        routes.setdefault(model_id, {})[group] = weight
    return routes


_routes: Fresh[dict[str, dict[str, int]]] = Fresh(_load)


def all_routes() -> dict[str, dict[str, int]]:
    return _routes.get()


def group_weights(model_id: str) -> dict[str, int] | None:
    """{node group: weight} for a model under rollout, or None when every node listing it serves it."""
    return all_routes().get(model_id)


def invalidate() -> None:
    _routes.invalidate()

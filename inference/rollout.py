"""Model rollouts: a model name users see, served by one or more node groups with weights.

With no `ModelRoute` rows for a model, every node that lists the model serves it. With rows, the
model's traffic is split between the named node groups by weight (blue-green: 100/0, then 90/10,
... 0/100, and back), and the router keeps each warm conversation where it was (inference.routing),
so a conversation does not change version mid-way while its cache is warm.

Read on the path of every message, so the rows are cached per process for
INFERENCE_FLEET_REFRESH_SECONDS (the same freshness as the node snapshot).
"""

from __future__ import annotations

import threading
import time

from django.conf import settings

from inference.models import ModelRoute

_lock = threading.Lock()
_cache: tuple[float, dict[str, dict[str, int]]] | None = None


def _load() -> dict[str, dict[str, int]]:
    routes: dict[str, dict[str, int]] = {}
    for model_id, group, weight in ModelRoute.objects.values_list("model", "group", "weight"):
        routes.setdefault(model_id, {})[group] = weight
    return routes


def all_routes() -> dict[str, dict[str, int]]:
    global _cache
    now = time.monotonic()
    with _lock:
        cached = _cache
    if cached is not None and cached[0] > now:
        return cached[1]
    routes = _load()
    with _lock:
        _cache = (now + settings.INFERENCE_FLEET_REFRESH_SECONDS, routes)
    return routes


def group_weights(model_id: str) -> dict[str, int] | None:
    """{node group: weight} for a model under rollout, or None when every node listing it serves it."""
    return all_routes().get(model_id)


def invalidate() -> None:
    global _cache
    with _lock:
        _cache = None

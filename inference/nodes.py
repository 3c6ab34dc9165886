"""Staff actions on nodes.

Every change here is a named action that also drops this process's fleet snapshot, so the router
sees it at once here and within INFERENCE_FLEET_REFRESH_SECONDS everywhere else. The admin calls
these (and records them in the audit log); nothing else writes a node's state.
"""

from __future__ import annotations

from django.conf import settings

from inference import fleet, gateway, samples
from inference.models import InferenceNode


def publish(node: InferenceNode, *, deleted: bool = False) -> None:
    """In gateway mode, mirror the node into smg's worker list: registered while it is enabled and
    not draining, removed otherwise. Raises gateway.GatewayError when smg cannot be told (the
    poller tries again on its next round)."""
    if settings.INFERENCE_ROUTING != "gateway":
        return
    if node.enabled and not node.draining and not deleted:
        gateway.register(node.base_url, node.api_key)
    else:
        gateway.unregister(node.base_url)


def _set(node: InferenceNode, **fields) -> InferenceNode:
    for field, value in fields.items():
        setattr(node, field, value)
    node.save(update_fields=list(fields))
    fleet.invalidate()
    publish(node)
    return node


def enable(node: InferenceNode) -> InferenceNode:
    """Take new requests again (also ends draining)."""
    return _set(node, enabled=True, draining=False)


def drain(node: InferenceNode) -> InferenceNode:
    """Finish the answers it has, take no new ones."""
    return _set(node, draining=True)


def disable(node: InferenceNode) -> InferenceNode:
    """No new requests and no polling (its answers in progress still finish: nothing aborts them)."""
    samples.forget(node.name)
    return _set(node, enabled=False)

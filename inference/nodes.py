"""Staff actions on nodes.

Every change here is a named action that also drops this process's fleet snapshot, so the router
sees it at once here and within INFERENCE_FLEET_REFRESH_SECONDS everywhere else. The admin calls
these (and records them in the audit log); nothing else writes a node's state.
"""

from __future__ import annotations

from inference import fleet, samples
from inference.models import InferenceNode


def _set(node: InferenceNode, **fields) -> InferenceNode:
    for field, value in fields.items():
        setattr(node, field, value)
    node.save(update_fields=list(fields))
    fleet.invalidate()
    return node


def enable(node: InferenceNode) -> InferenceNode:
    """Take new requests again (also ends draining)."""
    return _set(node, enabled=True, draining=False)


def drain(node: InferenceNode) -> InferenceNode:
    """Finish the answers it has, take no new ones."""
    return _set(node, draining=True)


def disable(node: InferenceNode) -> InferenceNode:
    """No new requests and no polling (its answers in progress still finish: nothing aborts them)."""
    node = _set(node, enabled=False)
    samples.forget(node.name)
    return node

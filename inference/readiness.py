"""Whether this process can serve people now: the readiness behind `/readyz` (inference/views.py).

It lives with the engines because the last check is theirs: serving means a database, Redis and an
engine, and only this app knows the engines (the first two are asked the foundation's way).

Three checks, each "ok", "failing" or "not checked":
- **database**: one `SELECT 1` on a connection from the pool (or a new one, without the pool);
- **redis**: one PING on the shared pool, when REDIS_URL is set (the embedded default has no Redis);
- **engines**: at least one node that may take requests (enabled, not draining, not down) is known
  to be up. Read from the fleet snapshot (`inference.fleet`), which holds what the poller last found
  (Celery beat's `poll_nodes`, every INFERENCE_POLL_SECONDS): a node the poller judged up (a row's
  health, or the single SGLANG_URL node's, kept in Redis as it has no row and forgotten when the poller
  has not renewed it for 30 s), or one with a load sample fresh enough to use (the poller writes one
  only after the node answered). So a probe makes no network call of its own to an engine, and says only
  what the poller knows: before its first round no engine counts as up, nor, once the poller has been
  stopped long enough, the SGLANG_URL node (a row keeps the health it was last judged). Not checked when the
  database or Redis failed (the snapshot reads both, and would only wait on them again).

`/healthz` is liveness, and does none of this (config/views.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from config.redis import sync_client
from inference import fleet
from inference.models import InferenceNode

OK, FAILING, NOT_CHECKED = "ok", "failing", "not checked"


@dataclass(frozen=True)
class Check:
    status: str
    #: What failed and why (error text, node names): for staff and the metrics token only.
    detail: str = ""


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:300]


def database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any failure to get or use a connection means "cannot serve"
        return Check(FAILING, _error(exc))
    return Check(OK)


def redis() -> Check:
    try:
        sync_client().ping()
    except Exception as exc:  # refused, timed out, no connection to spare: all "cannot serve"
        return Check(FAILING, _error(exc))
    return Check(OK)


def engines() -> Check:
    try:
        nodes = fleet.snapshot()
    except Exception as exc:  # the snapshot reads the database and Redis
        return Check(FAILING, _error(exc))
    up = [n.name for n in nodes if n.routable and (n.health == InferenceNode.Health.UP or n.load is not None)]
    others = [f"{n.name} ({'disabled' if not n.enabled else 'draining' if n.draining else n.health})" for n in nodes]
    others = [text for text, n in zip(others, nodes, strict=True) if n.name not in up]
    detail = f"up: {', '.join(up) or 'none'}; not up: {', '.join(others) or 'none'}"
    return Check(OK if up else FAILING, detail)


def readiness() -> dict[str, Check]:
    """Each check by name, in order."""
    checks = {"database": database()}
    if settings.REDIS_URL:
        checks["redis"] = redis()
    if all(check.status == OK for check in checks.values()):
        checks["engines"] = engines()
    else:
        checks["engines"] = Check(NOT_CHECKED, "not checked: the database or Redis failed")
    return checks

"""Gateway mode: the SGLang Model Gateway (`smg`) routes across the nodes; the admin stays the one
place nodes are managed.

When INFERENCE_ROUTING is "gateway", every generation goes to the gateway (inference.routing), and:

- a node's state in the admin is mirrored into smg's worker list through its workers API: enabled and
  not draining means registered (`POST /workers`), anything else means removed (`DELETE
  /workers/{id}`; smg stops sending it new requests, and the streams it has finish);
- the poller reads the nodes' health from smg's `GET /workers` (its own health checks) and their
  load from `GET /engine_metrics` (every worker's metrics, merged, each labelled `worker_addr`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx
from django.conf import settings

from inference.loads import EngineLoad, per_worker

log = logging.getLogger(__name__)
TIMEOUT_SECONDS = 5.0


class GatewayError(Exception):
    """The gateway could not be asked, or refused."""


@dataclass(frozen=True)
class Worker:
    id: str
    url: str
    healthy: bool


def gateway_url() -> str:
    return (settings.INFERENCE_GATEWAY_URL or settings.SGLANG_URL).rstrip("/")


def _http() -> httpx.Client:
    key = settings.SGLANG_API_KEY
    return httpx.Client(
        base_url=gateway_url(), timeout=TIMEOUT_SECONDS, headers={"Authorization": f"Bearer {key}"} if key else {}
    )


def _normal(url: str) -> str:
    return url.rstrip("/")


def _get(path: str) -> httpx.Response:
    try:
        with _http() as http:
            response = http.get(path)
    except httpx.HTTPError as exc:
        raise GatewayError(f"GET {path}: {exc}") from exc
    if response.status_code != 200:
        raise GatewayError(f"GET {path} answered {response.status_code}")
    return response


def workers() -> list[Worker]:
    return [
        Worker(id=str(w.get("id")), url=_normal(str(w.get("url"))), healthy=bool(w.get("is_healthy")))
        for w in _get("/workers").json().get("workers") or []
    ]


def loads() -> dict[str, EngineLoad]:
    """{worker url: load} from the gateway's merged engine metrics."""
    return {_normal(url): load for url, load in per_worker(_get("/engine_metrics").text).items()}


def register(url: str, api_key: str = "") -> None:
    """Make smg send requests to the node at `url` (nothing happens if it already does)."""
    if any(w.url == _normal(url) for w in workers()):
        return
    body = {"url": _normal(url), **({"api_key": api_key} if api_key else {})}
    try:
        with _http() as http:
            response = http.post("/workers", json=body)
    except httpx.HTTPError as exc:
        raise GatewayError(f"POST /workers: {exc}") from exc
    if response.status_code not in (200, 201, 202):
        raise GatewayError(f"POST /workers answered {response.status_code}: {response.text[:200]}")


def unregister(url: str) -> None:
    """Stop smg sending new requests to the node at `url` (nothing happens if it is not listed)."""
    for worker in workers():
        if worker.url != _normal(url):
            continue
        try:
            with _http() as http:
                response = http.delete(f"/workers/{worker.id}")
        except httpx.HTTPError as exc:
            raise GatewayError(f"DELETE /workers/{worker.id}: {exc}") from exc
        if response.status_code not in (200, 202, 204, 404):
            raise GatewayError(f"DELETE /workers/{worker.id} answered {response.status_code}")

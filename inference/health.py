"""The poller: every node's health and load, every INFERENCE_POLL_SECONDS.

For each enabled node, in parallel: `GET /health` (SGLang answers 200 when it can generate), its load
(`/metrics` from a server started with --enable-metrics, read with prometheus_client's parser, which
has the KV usage and cache hit rate; else `/v1/loads` or `/get_load`), while the node's models
are not known, `/v1/models` (else the model info), and, when it is first met or comes back up, what
it can do (inference.capabilities, from `/model_info` and `/server_info`). A node is marked down
after INFERENCE_DOWN_AFTER failed checks in a row and up after INFERENCE_UP_AFTER good ones, so one
slow answer does not flap it. Each check saves the row's counters and time (its health moves only at
the thresholds); load goes to inference.samples, never to the row.

In gateway mode (INFERENCE_ROUTING=gateway) the nodes' health is smg's own view (`GET /workers`),
their load comes from its merged `/engine_metrics`, and smg's worker list is kept in line with the
nodes (inference.gateway).

Runs as the Celery beat task `inference.tasks.poll_nodes`, or in Daphne with the embedded default.

A node can pass `/health` and still fail every generation (an error in its HTTP layer, a broken
model). So the generations themselves count too (`request_failed`, from chat.generation.engine):
INFERENCE_DOWN_AFTER failed in a row, counted across processes, mark the node down at once; and a
node that is down must then also complete a one-token generation (`_probe_generation`) before the
poller's good checks count towards bringing it back, so it does not flap up and down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import httpx
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from inference import capabilities, catalogue, fleet, gateway, samples
from inference.client import GenerationRequest, Timeouts
from inference.connect import engine_client
from inference.environment import sync_environment_nodes
from inference.errors import EngineError
from inference.loads import EngineLoad, from_metrics
from inference.models import InferenceNode

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_SECONDS = 5.0
#: Failed generations count as "in a row" while less than this apart (the counter then lapses).
FAILURE_WINDOW_SECONDS = 120
#: Nodes this process has counted a failed generation against (only they need resetting on success).
_failing_here: set[str] = set()


@dataclass
class Check:
    """What one poll found out about one node."""

    healthy: bool
    load: EngineLoad | None = None
    model_ids: list[str] | None = None
    error: str = ""
    #: What the engine says it can do (inference.capabilities), when it was asked and answered.
    capabilities: dict[str, bool | str] | None = None


async def _check(
    url: str, api_key: str, *, discover: bool, probe: bool = False, embedding: bool = False, learn: bool = False
) -> Check:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=HEALTH_TIMEOUT_SECONDS) as http:
        try:
            response = await http.get("/health")
        except httpx.HTTPError as exc:
            return Check(healthy=False, error=f"/health: {type(exc).__name__}: {exc}"[:500])
        if not response.is_success:
            return Check(healthy=False, error=f"/health answered {response.status_code}")
        if probe:
            failure = await (_probe_embedding(url, api_key) if embedding else _probe_generation(url, api_key))
            if failure:
                return Check(healthy=False, error=failure)
        check = Check(healthy=True)
        try:
            check.load = await _load(http, url, api_key)
        except (httpx.HTTPError, EngineError, ValueError) as exc:
            check.error = f"load: {exc}"[:500]
        if discover:
            check.model_ids = await _served_models(http)
        if learn:
            check.capabilities = await _capabilities(http)
        return check


async def _info(http: httpx.AsyncClient, *paths: str) -> dict | None:
    """The first of `paths` that answers a JSON object (SGLang's current name, then its older one)."""
    for path in paths:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            response = await http.get(path)
            if response.is_success and isinstance(info := response.json(), dict):
                return info
    return None


async def _capabilities(http: httpx.AsyncClient) -> dict[str, bool] | None:
    """What the node says it can do, from its model and server info; None when it did not say."""
    model_info = await _info(http, "/model_info", "/get_model_info")
    if model_info is None:
        return None
    return capabilities.from_engine(model_info, await _info(http, "/server_info", "/get_server_info"))


async def _probe_generation(url: str, api_key: str) -> str:
    """One token generated, as users' requests are: "" when it works, else what went wrong."""
    timeouts = Timeouts(connect=HEALTH_TIMEOUT_SECONDS, total=HEALTH_TIMEOUT_SECONDS)
    try:
        async with engine_client(url, api_key=api_key, timeouts=timeouts) as client:
            await client.generate(GenerationRequest(prompt="ping", max_new_tokens=1, temperature=0))
    except (EngineError, httpx.HTTPError) as exc:
        return f"generation probe: {type(exc).__name__}: {exc}"[:500]
    return ""


async def _probe_embedding(url: str, api_key: str) -> str:
    """An embedding node's probe: one input embedded, "" when it works, else what went wrong."""
    timeouts = Timeouts(connect=HEALTH_TIMEOUT_SECONDS, total=HEALTH_TIMEOUT_SECONDS)
    try:
        async with engine_client(url, api_key=api_key, timeouts=timeouts) as client:
            await client.embed(["ping"])
    except (EngineError, httpx.HTTPError) as exc:
        return f"embedding probe: {type(exc).__name__}: {exc}"[:500]
    return ""


def _failures_key(node: str) -> str:
    return f"sglchat:inference:failed-generations:{node}"


def request_failed(node: str, error: str) -> bool:
    """A generation on `node` failed because of the node (no answer, a 5xx, a timeout; not "busy", nor a
    request it could not have served: `EngineError.node_at_fault`).
    Counted across processes; the INFERENCE_DOWN_AFTER-th in a row marks the node down. Returns
    whether this call marked it down."""
    key = _failures_key(node)
    cache.add(key, 0, FAILURE_WINDOW_SECONDS)
    try:
        count = cache.incr(key)
    except ValueError:  # lapsed between the two calls
        cache.set(key, count := 1, FAILURE_WINDOW_SECONDS)
    cache.touch(key, FAILURE_WINDOW_SECONDS)
    _failing_here.add(node)
    if count < settings.INFERENCE_DOWN_AFTER:
        return False
    marked = (
        InferenceNode.objects.filter(name=node)
        .exclude(health=InferenceNode.Health.DOWN)
        .update(
            health=InferenceNode.Health.DOWN,
            health_changed=timezone.now(),
            successes=0,
            last_error=f"{count} generation requests in a row failed; the last: {error}"[:500],
        )
    )
    if marked:
        log.warning("inference node %s is down: %d generation requests in a row failed (%s)", node, count, error)
        fleet.invalidate()
    return bool(marked)


def failing_here(node: str) -> bool:
    """Whether this process has counted failures against `node` that a success should clear."""
    return node in _failing_here


def request_succeeded(node: str) -> None:
    """A generation on `node` produced its first token: its failures are no longer in a row."""
    _failing_here.discard(node)
    cache.delete(_failures_key(node))


async def _served_models(http: httpx.AsyncClient) -> list[str] | None:
    """The ids the node serves: `/v1/models`, else its model info (`/model_info`, or `/get_model_info`
    on older SGLang: the served name, or the model path where there is none). None: ask next poll."""
    with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
        response = await http.get("/v1/models")
        if response.is_success:
            ids = [str(card["id"]) for card in response.json().get("data") or [] if card.get("id")]
            if ids:
                return ids
    for path in ("/model_info", "/get_model_info"):
        with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
            response = await http.get(path)
            if response.is_success:
                info = response.json()
                name = info.get("served_model_name") or info.get("model_path")
                if name:
                    return [str(name)]
    return None


async def _load(http: httpx.AsyncClient, url: str, api_key: str) -> EngineLoad:
    response = await http.get("/metrics")
    if response.status_code == 200:
        return from_metrics(response.text)
    # No --enable-metrics: SGLang's load endpoints (fewer figures, no KV usage on the old one).
    async with engine_client(url, api_key=api_key, timeouts=Timeouts(control=HEALTH_TIMEOUT_SECONDS)) as client:
        return await client.load()


async def _check_all(targets: list[tuple[str, str, bool, bool, bool, bool]]) -> list[Check]:
    return await asyncio.gather(
        *(
            _check(url, key, discover=discover, probe=probe, embedding=embedding, learn=learn)
            for url, key, discover, probe, embedding, learn in targets
        )
    )


def _judge(node: InferenceNode, check: Check, now) -> list[str]:
    """Apply one check to the row's counters and health; the names of the fields to save."""
    node.last_checked = now
    changed = ["last_checked", "successes", "failures"]
    if check.healthy:
        node.successes, node.failures = node.successes + 1, 0
        # A node never judged is up at its first good check (a fresh deployment routes at once); one
        # that was down needs INFERENCE_UP_AFTER good checks in a row.
        if node.health == InferenceNode.Health.UNKNOWN or (
            node.health == InferenceNode.Health.DOWN and node.successes >= settings.INFERENCE_UP_AFTER
        ):
            node.health, node.health_changed = InferenceNode.Health.UP, now
            changed += ["health", "health_changed"]
            cache.delete(_failures_key(node.name))  # it starts again with a clean record
            log.info("inference node %s is up", node.name)
    else:
        node.failures, node.successes = node.failures + 1, 0
        if node.health != InferenceNode.Health.DOWN and node.failures >= settings.INFERENCE_DOWN_AFTER:
            node.health, node.health_changed = InferenceNode.Health.DOWN, now
            changed += ["health", "health_changed"]
            log.warning("inference node %s is down: %s", node.name, check.error)
    if check.error != node.last_error:
        node.last_error = check.error
        changed.append("last_error")
    if check.model_ids and check.model_ids != node.model_ids:
        node.model_ids = check.model_ids
        changed.append("model_ids")
    if check.capabilities is not None and check.capabilities != node.capabilities:
        node.capabilities = check.capabilities
        changed.append("capabilities")
    return changed


def poll_nodes() -> int:
    """Check every enabled node once; returns how many answered."""
    sync_environment_nodes()
    if settings.INFERENCE_ROUTING == "gateway":
        return _poll_through_gateway(list(InferenceNode.objects.all()))
    nodes = list(InferenceNode.objects.filter(enabled=True))
    if not nodes:
        return _poll_default_node()
    # A node that is down must generate too before it counts as healthy: its /health may pass while
    # its generations fail (it was marked down for that).
    # An embedding node's probe embeds instead (it cannot generate).
    embedding = catalogue.embedding_model_ids()
    checks = asyncio.run(
        _check_all(
            [
                (
                    n.base_url,
                    n.api_key,
                    not n.model_ids,
                    n.health == InferenceNode.Health.DOWN,
                    bool(embedding.intersection(n.model_ids or ())),
                    # Asked when first met and whenever it comes back (a restart may change its flags).
                    not n.capabilities or n.health != InferenceNode.Health.UP,
                )
                for n in nodes
            ]
        )
    )
    now = timezone.now()
    for node, check in zip(nodes, checks, strict=True):
        if check.load is not None:
            samples.record(node.name, check.load)
        elif not check.healthy:
            samples.forget(node.name)
        node.save(update_fields=_judge(node, check, now))
    fleet.invalidate()
    return sum(check.healthy for check in checks)


def _poll_default_node() -> int:
    """No rows: SGLANG_URL is the one node, judged like any (the same counters and thresholds); what
    was judged is kept beside its load sample (inference.samples), as it has no row to keep it."""
    view = fleet.default_node()
    state = samples.judged(view.name, view.base_url) or {}
    # Down, it must generate too before it counts as healthy, as a listed node must.
    down = state.get("health") == InferenceNode.Health.DOWN
    check = asyncio.run(_check(view.base_url, view.api_key, discover=False, probe=down))
    if check.load is not None:
        samples.record(view.name, check.load)
    else:
        samples.forget(view.name)
    node = InferenceNode(
        name=view.name,
        base_url=view.base_url,
        health=state.get("health", InferenceNode.Health.UNKNOWN),
        successes=state.get("successes", 0),
        failures=state.get("failures", 0),
        last_error=state.get("last_error", ""),
    )
    now = timezone.now()
    _judge(node, check, now)
    samples.keep_judged(
        view.name,
        view.base_url,
        {
            "health": node.health,
            "successes": node.successes,
            "failures": node.failures,
            "last_error": node.last_error,
            "last_checked": now.timestamp(),
        },
    )
    fleet.invalidate()
    return int(check.healthy)


def _poll_through_gateway(nodes: list[InferenceNode]) -> int:
    """Gateway mode: health from smg's own checks (`GET /workers`), load from its merged
    `/engine_metrics`; and smg's worker list is brought back in line with the nodes: exactly the
    enabled, non-draining ones (a change the admin could not tell smg at the time, a node deleted or
    moved meanwhile, or a restarted gateway). With no nodes at all, smg's own list is the fleet and
    is left alone."""
    try:
        listed = {worker.url: worker for worker in gateway.workers()}
    except gateway.GatewayError as exc:
        log.warning("the gateway could not be polled: %s", exc)
        return 0
    try:
        loads = gateway.loads()
    except gateway.GatewayError as exc:
        # smg answers 500 here while it has no workers: its list must still be put right.
        log.warning("the gateway's engine metrics could not be read: %s", exc)
        loads = {}
    serving = [node for node in nodes if node.enabled and not node.draining]
    wanted = {node.base_url.rstrip("/") for node in serving}
    for url in listed.keys() - wanted if nodes else ():
        try:
            gateway.unregister(url)
        except gateway.GatewayError as exc:
            log.warning("the gateway could not drop %s: %s", url, exc)
    now = timezone.now()
    answered = 0
    for node in serving:
        url = node.base_url.rstrip("/")
        worker = listed.get(url)
        if worker is None:
            try:
                gateway.register(url, node.api_key)
            except gateway.GatewayError as exc:
                log.warning("the gateway could not take %s: %s", node.name, exc)
            continue  # judged once smg lists it
        check = Check(
            healthy=worker.healthy,
            load=loads.get(url),
            error="" if worker.healthy else "the gateway reports it unhealthy",
        )
        if check.load is not None:
            samples.record(node.name, check.load)
        else:
            samples.forget(node.name)
        node.save(update_fields=_judge(node, check, now))
        answered += worker.healthy
    fleet.invalidate()
    return answered

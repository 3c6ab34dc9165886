"""Embedding requests on the fleet: route one to a node serving the model, call it, try once elsewhere.

The engine half of /v1/embeddings (admission and billing are the API's, api.embedding_service). The
node is chosen by `inference.routing.choose_node`, like a chat's, among the nodes that list the
embedding model (else SGLANG_EMBEDDING_URL); the call is `SGLangClient.embed`. A failure that is the
node's (no answer, a 5xx) counts against its health, as a failed generation does, and the request is
sent once more to another node, if there is one; a refusal (4xx) or a busy engine is not retried.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async

from inference import health, routing
from inference.client import EmbeddingResult
from inference.connect import engine_client
from inference.errors import EngineError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Embedded:
    result: EmbeddingResult
    #: The node that answered (recorded on the ledger row).
    node: str


async def count_tokens(route: routing.Route, text: str) -> int:
    """The engine's count of `text` (its /v1/tokenize), on the node the request was routed to."""
    async with engine_client(route.node.base_url, api_key=route.node.api_key, via_gateway=route.via_gateway) as c:
        return await c.count_tokens(text, model=route.engine_model)


async def embed(
    route: routing.Route,
    inputs: list[str] | list[list[int]],
    *,
    model_id: str,
    dimensions: int | None = None,
    priority: int | None = None,
) -> Embedded:
    """Embed `inputs` on `route`, or (once) on another node if that one fails. Raises an EngineError."""
    tried: list[str] = []
    while True:
        node = route.node
        sent = routing.sending(node.name)
        try:
            async with engine_client(node.base_url, api_key=node.api_key, via_gateway=route.via_gateway) as client:
                result = await client.embed(inputs, model=route.engine_model, dimensions=dimensions, priority=priority)
        except EngineError as exc:
            if not exc.node_at_fault or route.via_gateway:
                raise
            routing.suspect(node.name)
            await database_sync_to_async(health.request_failed)(node.name, exc.detail)
            tried.append(node.name)
            if len(tried) > 1:
                raise
            try:
                route = await database_sync_to_async(routing.choose_node)(model_id, exclude=tried)
            except routing.NoNodeAvailable:
                raise exc from None
            log.info("embedding request failed on %s (%s); trying %s", node.name, exc.detail, route.node.name)
            continue
        finally:
            routing.finished(node.name, sent)
        if health.failing_here(node.name):
            await database_sync_to_async(health.request_succeeded)(node.name)
        return Embedded(result=result, node=node.name)

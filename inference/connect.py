"""The product's clients for its engines, all made here, from the settings.

Every `SGLangClient` the product makes comes from `engine_client`: the path of an answer
(chat/generation/engine.py keeps one per process, engine address and event loop, and a short-lived one
to count a saved answer's tokens), the health poller's generation probe and load read
(inference/health.py), the node admin's test (inference/admin.py) and the `llm` moderation backend's
guard model (moderation/backends/llm.py). So an address is spoken to the same way whoever asks: the
node's key (else SGLANG_API_KEY), the protocol (SGLANG_MODE), the gateway (a route through smg, or
SGLANG_BEHIND_GATEWAY) and, unless the caller needs others, the answers' time-outs.

(The health poller's `/health` and `/metrics` reads, the node admin's cache flush and the gateway's
worker registration are plain HTTP requests, not generations: inference/health.py, admin.py, gateway.py.)
"""

from __future__ import annotations

from django.conf import settings

from inference.client import SGLangClient, Timeouts


def answer_timeouts() -> Timeouts:
    """How long an answer waits for its first token and between tokens (ENGINE_*_TIMEOUT_SECONDS)."""
    return Timeouts(
        first_token=settings.ENGINE_FIRST_TOKEN_TIMEOUT_SECONDS,
        between_tokens=settings.ENGINE_BETWEEN_TOKENS_TIMEOUT_SECONDS,
    )


def engine_client(
    url: str,
    *,
    api_key: str = "",
    via_gateway: bool = False,
    timeouts: Timeouts | None = None,
    keepalive_connections: int = 20,
) -> SGLangClient:
    """A new client for the engine at `url` (close it when done: `async with`)."""
    return SGLangClient(
        url,
        api_key=api_key or settings.SGLANG_API_KEY or None,
        mode=settings.SGLANG_MODE,
        behind_gateway=via_gateway or settings.SGLANG_BEHIND_GATEWAY,
        keepalive_connections=keepalive_connections,
        timeouts=timeouts or answer_timeouts(),
    )

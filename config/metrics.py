"""The product's own figures for Prometheus, served at /metrics to staff or with METRICS_TOKEN.

What is counted, and where:
- answers that ended, by source (`chat`: the page's SSE and WebSocket; `api`: /v1) and final
  status, with their time to first token and their tokens (chat.generation.settle, api.views);
- answers being generated now (the runner and the API stream);
- every HTTP response by status code, refusals included (config.overload.ConcurrencyGate sees them
  all, even the 503s it answers itself).

With several processes (Daphne workers, Celery), set PROMETHEUS_MULTIPROC_DIR to a directory they
share and empty it when they start (prometheus_client's multiprocess mode): each process writes
its own files and /metrics adds them up. Without it, /metrics shows this process only, which is
right for the embedded default's single process.
"""

from __future__ import annotations

import hmac
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

ANSWERS = Counter("sglchat_answers", "Answers that ended, by source and final status.", ["source", "status"])
TIME_TO_FIRST_TOKEN = Histogram(
    "sglchat_time_to_first_token_seconds",
    "From the engine request to the first token of an answer.",
    ["source"],
    buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
TOKENS = Counter(
    "sglchat_tokens", "Tokens of ended answers: prompt, cached (part of prompt) and completion.", ["source", "kind"]
)
IN_FLIGHT = Gauge("sglchat_answers_in_flight", "Answers being generated now.", ["source"], multiprocess_mode="livesum")
ADMISSION_WAITING = Gauge(
    "sglchat_admission_waiting",
    "Paid requests waiting for an admission place now (every place taken; at most ADMISSION_PREMIUM_WAIT_SECONDS).",
    multiprocess_mode="livesum",
)
RESPONSE_CACHE = Counter(
    "sglchat_response_cache",
    "Requests by what the response cache did: hit (answered from it), semantic-hit (from a similar first "
    "question's answer), miss, bypass (not cacheable), kept.",
    ["result"],
)
SEMANTIC_CACHE = Counter(
    "sglchat_semantic_cache",
    "First questions the semantic cache looked up, by result: hit (a similar question's answer), miss, "
    "unavailable (the question could not be embedded), kept.",
    ["result"],
)
AUTO_ROUTES = Counter(
    "sglchat_auto_routes",
    "Turns Auto sent to each model, by route: easy, hard (difficulty), images, tools, context (rules), plan.",
    ["model", "route"],
)
HTTP_RESPONSES = Counter("sglchat_http_responses", "HTTP responses by status code.", ["status"])
MODERATION_VERDICTS = Counter(
    "sglchat_moderation_verdicts",
    "Moderation verdicts by stage, backend and verdict (allow, flag, block, error).",
    ["stage", "backend", "verdict"],
)


NODE_REQUESTS = Counter(
    "sglchat_node_requests",
    "Generation requests to the nodes of a model under a rollout, by node and result (answered, failed: by the "
    "node, and tried again elsewhere before the first token): each version's error rate.",
    ["node", "result"],
)
NODE_TIME_TO_FIRST_TOKEN = Histogram(
    "sglchat_node_time_to_first_token_seconds",
    "From the engine request to the first token, by node, for models under a rollout (each version's TTFT).",
    ["node"],
    buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
ANSWER_RATINGS = Counter(
    "sglchat_answer_ratings",
    "Ratings people gave answers (a rating changed counts again), by model, the node that wrote the answer "
    "(its version) and rating (up, down).",
    ["model", "node", "rating"],
)
ROLLOUT_SHARE = Gauge(
    "sglchat_rollout_share_percent",
    "The new version's share of its model's traffic in the model's last rollout, by model and new version (node "
    "group): set as each step or decision is taken.",
    ["model", "group"],
    multiprocess_mode="mostrecent",
)
ROLLOUT_STATE = Gauge(
    "sglchat_rollout_state",
    "1 for the status the model's last rollout is in (running, held, completed, rolled_back), 0 for the others.",
    ["model", "group", "status"],
    multiprocess_mode="mostrecent",
)
EVAL_SCORE = Gauge(
    "sglchat_eval_score",
    "The score (0 to 1) of the last completed run of an eval set, by set, model and version (node group).",
    ["eval_set", "model", "group"],
    multiprocess_mode="mostrecent",
)


def answer_ended(
    source: str,
    status: str,
    *,
    ttft_ms: int | None,
    prompt_tokens: int = 0,
    cached_tokens: int = 0,
    completion_tokens: int = 0,
) -> None:
    ANSWERS.labels(source, status).inc()
    if ttft_ms is not None:
        TIME_TO_FIRST_TOKEN.labels(source).observe(ttft_ms / 1000)
    for kind, count in (("prompt", prompt_tokens), ("cached", cached_tokens), ("completion", completion_tokens)):
        if count:
            TOKENS.labels(source, kind).inc(count)


def _registry():
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def staff_or_scraper(request: HttpRequest) -> bool:
    """A signed-in staff session, or a request bearing METRICS_TOKEN (also /readyz's details)."""
    token = settings.METRICS_TOKEN
    scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(sent.strip().encode(), token.encode()):
        return True
    return request.user.is_authenticated and request.user.is_staff


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus's text format, for staff or a scraper holding METRICS_TOKEN; never public."""
    if not staff_or_scraper(request):
        status = 403 if request.user.is_authenticated else 401
        response = JsonResponse(
            {
                "error": {
                    "code": "forbidden" if status == 403 else "unauthenticated",
                    "status": status,
                    "message": (
                        "Metrics are for staff, or a scraper sending 'Authorization: Bearer' with METRICS_TOKEN."
                    ),
                }
            },
            status=status,
        )
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)

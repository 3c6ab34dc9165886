"""Tracing: OpenTelemetry spans from the request to the GPU's scheduler, exported over OTLP.

Off unless an OTLP endpoint is configured (the standard OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTEL_SDK_DISABLED=true turns it off again). Then `set_up` gives the
process its tracer provider and instruments, through the maintained instrumentation packages:
- every HTTP request (`traced_asgi`, OpenTelemetry's ASGI middleware around everything that answers
  HTTP): its server span lasts as long as the response, so an answer's SSE stream is inside it. A
  WebSocket may stay open for hours: each of its commands is a trace of its own (chat.consumers).
  Django's own instrumentation is not used: it ends its span when the view returns, before a streamed
  response has sent anything, and the ASGI span already covers Django and Channels;
- httpx (the engines' and the gateway's requests, which carry `traceparent`: SGLang parents its own
  spans on it, and the SGLang Model Gateway passes it on), psycopg and Redis;
- Celery: a task published in a trace continues it in the worker (`set_up` runs in each worker process,
  after the fork: config/celery.py).

The path of one answer adds its own spans (`TRACER`): admission, its wait, routing, `chat <model>`
with the GenAI semantic conventions, moderation windows, settlement. No span or attribute holds what
anyone wrote: URLs are recorded without their query, Redis commands and SQL without their values, and
our spans carry counts, names and decisions only.

Only requests begin traces (`_requests_only`): what runs on its own (polls, periodic tasks, the channel
layer) starts none. Trace context from outside (`traceparent`, `tracestate`, `baggage` sent by a client)
is dropped at the door, so nobody outside decides what is sampled or which trace an answer joins.

The sampler, batching and exporter read the standard OTEL_* variables (OTEL_TRACES_SAMPLER,
OTEL_BSP_SCHEDULE_DELAY, OTEL_EXPORTER_OTLP_HEADERS...). When off, the API's no-op tracer makes each
span on the answer's path cost a function call.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.urls import Resolver404, resolve
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

log = logging.getLogger(__name__)

TRACER = trace.get_tracer("sglchat")
__all__ = ["TRACER", "Span", "SpanKind", "Status", "StatusCode"]

_set_up = False
_lock = threading.Lock()
#: What `set_up` imports: only when tracing is on, so a process without it pays nothing for them.
_MODULES = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.instrumentation.asgi",
    "opentelemetry.instrumentation.celery",
    "opentelemetry.instrumentation.httpx",
    "opentelemetry.instrumentation.psycopg",
    "opentelemetry.instrumentation.redis",
    "opentelemetry.sdk.trace",
)
#: Trace context a client may send: never trusted from outside (a client could force sampling, pick the
#: trace id an answer records, or send baggage on to the engines). Each request starts its own trace.
_CLIENT_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate", b"baggage"})
#: Probes and scrapes: polled every few seconds, about nobody's request.
_NOT_TRACED = "/healthz,/readyz,/metrics,/favicon.ico"


def set_up(service_name: str) -> None:
    """Export this process's spans over OTLP, as `service_name` unless OTEL_SERVICE_NAME names it, and
    instrument the libraries. Once per process; nothing when tracing is off."""
    global _set_up
    if not settings.TRACING:
        return
    with _lock:
        if _set_up:
            return
        _set_up = True
    preload()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource, sampler=_requests_only())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    HTTPXClientInstrumentor().instrument()
    PsycopgInstrumentor().instrument(enable_commenter=False, skip_dep_check=True)
    RedisInstrumentor().instrument()
    CeleryInstrumentor().instrument()
    log.info("tracing on: spans of %s exported over OTLP", resource.attributes[SERVICE_NAME])


def preload() -> None:
    """Import what `set_up` needs (a forking Celery worker, before the fork: its children then start
    quickly, as their pool expects). Nothing when tracing is off."""
    if settings.TRACING:
        for module in _MODULES:
            importlib.import_module(module)


def _requests_only():
    """Traces begin with someone's request (an HTTP request, a WebSocket command: a server span) and
    follow it into everything it causes, across processes. What runs on its own (the health poller's
    calls every few seconds, the channel layer's reads, periodic tasks) starts none, so the backend keeps
    the answers. Among requests, the OTEL_TRACES_SAMPLER from the environment decides (default: all)."""
    from opentelemetry.sdk.trace.sampling import (
        ALWAYS_OFF,
        ParentBased,
        Sampler,
        _get_from_env_or_default,
    )

    requests = _get_from_env_or_default()

    class RequestsOnly(Sampler):
        def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, **kwargs):
            chosen = requests if kind == SpanKind.SERVER else ALWAYS_OFF
            return chosen.should_sample(parent_context, trace_id, name, kind, attributes, links, **kwargs)

        def get_description(self) -> str:
            return f"RequestsOnly({requests.get_description()})"

    return ParentBased(root=RequestsOnly())


def shut_down() -> None:
    """Send the spans not yet exported (a process about to exit)."""
    provider = trace.get_tracer_provider()
    if hasattr(provider, "shutdown"):
        provider.shutdown()


def traced_asgi(application: Callable) -> Callable:
    """`application` (HTTP) inside one server span per request, when tracing is on."""
    if not settings.TRACING:
        return application
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    traced = OpenTelemetryMiddleware(
        application,
        excluded_urls=_NOT_TRACED,
        default_span_details=_span_details,
        server_request_hook=_without_query,
        # One span per message sent would be one per token streamed.
        exclude_spans=["receive", "send"],
    )

    async def without_client_trace(scope, receive, send):
        headers = scope.get("headers") or ()
        if any(name in _CLIENT_TRACE_HEADERS for name, _value in headers):
            scope = {**scope, "headers": [(n, v) for n, v in headers if n not in _CLIENT_TRACE_HEADERS]}
        await traced(scope, receive, send)

    return without_client_trace


def _span_details(scope: dict) -> tuple[str, dict]:
    """ "POST /chat/api/send": the route's pattern, not the path (ids would make every name unique)."""
    method = scope.get("method") or ("WebSocket" if scope.get("type") == "websocket" else "HTTP")
    route = route_of(scope.get("path", ""))
    return (f"{method} {route}" if route else method), ({"http.route": route} if route else {})


def route_of(path: str) -> str:
    """The URL pattern that `path` matches, as "/chat/api/messages/<int:message_id>/stream"; "" if none."""
    try:
        match = resolve(path)
    except Resolver404:
        return ""
    return "/" + (match.route or "")


def _without_query(span: Span, scope: dict) -> None:
    """A query string may hold what someone typed (a search): the URL is recorded without it."""
    if span.is_recording() and scope.get("query_string"):
        scheme, server = scope.get("scheme", "http"), scope.get("server") or ("", None)
        host = f"{server[0]}:{server[1]}" if server[1] else server[0]
        span.set_attribute("http.url", f"{scheme}://{host}{scope.get('path', '')}")
        span.set_attribute("http.target", scope.get("path", ""))
        # The stable conventions' name for it (OTEL_SEMCONV_STABILITY_OPT_IN=http).
        span.set_attribute("url.query", "(not recorded)")


def span(name: str, **options):
    """One of our spans (a context manager): an exception leaving it is not recorded on it, since its
    message may quote what someone wrote; the span says only that it failed, and with which type."""
    return TRACER.start_as_current_span(name, record_exception=False, set_status_on_exception=False, **options)


def current_span() -> Span:
    return trace.get_current_span()


def trace_id() -> str:
    """The current trace's id, 32 hex digits; "" outside a sampled trace."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid and context.trace_flags.sampled else ""


def fresh_context() -> contextvars.Context:
    """An empty context that keeps only the current trace: for work that outlives its request (an
    answer's runner), so its spans stay in the request's trace."""
    current = otel_context.get_current()
    fresh = contextvars.Context()
    fresh.run(otel_context.attach, current)
    return fresh


def present(attributes: dict[str, Any]) -> dict[str, Any]:
    """The attributes that have a value (OpenTelemetry takes no None)."""
    return {key: value for key, value in attributes.items() if value is not None}


def record(span: Span, attributes: dict[str, Any]) -> None:
    """Set the attributes that have a value."""
    if span.is_recording():
        span.set_attributes(present(attributes))

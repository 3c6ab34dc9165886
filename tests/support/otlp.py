"""An OTLP/HTTP trace receiver for tests: what a process exported, span by span and byte by byte.

Usage::

    with OTLPReceiver() as receiver:
        start something with OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint
        (or a traces URL of f"{receiver.endpoint}/v1/traces")
        spans = receiver.wait_for(lambda spans: [s for s in spans if s.name == "x"])
        assert not any(b"secret" in body for body in receiver.raw())

It listens on 127.0.0.1 (a free port) in a background thread and takes ``POST /v1/traces`` with
``Content-Type: application/x-protobuf`` (gzip-encoded or not), as the OpenTelemetry OTLP/HTTP
exporter sends it, and answers 200 with an empty ExportTraceServiceResponse. ``raw()`` holds each
request body as it arrived, decompressed: every byte a process sent, for searching.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.support.waiting import wait_until

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class ReceivedSpan:
    service: str  # the resource's service.name
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # 16 hex digits, or "" for a root
    kind: str  # "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER" or "UNSPECIFIED"
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    status: str  # "UNSET", "OK" or "ERROR"
    links: tuple[str, ...] = ()  # span ids this span links to
    events: tuple[str, ...] = ()  # event names, in order


def decode_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as plain Python (arrays as lists, key-value lists as dicts)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [decode_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: decode_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


def _attributes(pairs) -> dict[str, Any]:
    return {kv.key: decode_value(kv.value) for kv in pairs}


def _spans_of(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    out = []
    for resource_spans in request.resource_spans:
        service = str(_attributes(resource_spans.resource.attributes).get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        service=service,
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                        attributes=_attributes(span.attributes),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        status=Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_"),
                        links=tuple(link.span_id.hex() for link in span.links),
                        events=tuple(event.name for event in span.events),
                    )
                )
    return out


class OTLPReceiver:
    """Collects every span POSTed to ``{endpoint}/v1/traces``. Thread-safe; a context manager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._raw: list[bytes] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The base URL (OTEL_EXPORTER_OTLP_ENDPOINT); traces go to this plus /v1/traces."""
        assert self._server is not None, "start() the receiver first"  # nosec B101  # test-support misuse
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OTLPReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != TRACES_PATH:
                    self.send_error(404)
                    return
                if self.headers.get("Content-Type", "").split(";")[0].strip() != PROTOBUF:
                    self.send_error(415)
                    return
                encoding = self.headers.get("Content-Encoding", "").strip().lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._add(body, _spans_of(request))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", PROTOBUF)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = self._thread = None

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _add(self, body: bytes, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            self._raw.append(body)
            self._spans.extend(spans)

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far (a snapshot)."""
        with self._lock:
            return list(self._spans)

    def raw(self) -> list[bytes]:
        """Every request body received so far, decompressed (a snapshot)."""
        with self._lock:
            return list(self._raw)

    def wait_for(self, predicate, timeout: float = 30):
        """Poll until ``predicate(spans)`` is truthy and return its value (raises AssertionError on timeout)."""
        return wait_until(lambda: predicate(self.spans()), timeout=timeout, what="spans at the OTLP receiver")

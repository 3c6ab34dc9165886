"""SGLang's request tracing (``--enable-trace``): OpenTelemetry spans for every generation request.

Modelled on sglang 0.5.23 ``srt/observability/trace.py`` (span mechanics, exporter, ids) and
``srt/observability/req_time_stats.py`` (which stage spans open and close at which moment), with the
root attributes of ``managers/tokenizer_manager.py`` (``convert_to_span_attrs``). One request's tree,
in unified (non-PD) mode at the default trace level 3::

    " Req 1a2b3c4d"                     root; a child of the caller's W3C ``traceparent``, if any
      "Tokenizer(host:… | pid:…)"       ends when the request is handed to the scheduler
        tokenize, api_server_dispatch
      "Scheduler [TP 0]  [PP 0] (host:… | pid:…)"   ends when the request leaves the batch
        request_process, prefill_waiting, prefill_forward, decode_waiting,
        decode_forward > decode_loop (one per decode step, attribute decode_ct)

Each stage span that opens at the top of its process's span links to the stage before it (across
the tokenizer/scheduler hand-off too); "schedule" events (batch id, size, mode) and "retract" events
land in the stage span whose time they fall in. The root gets ``rid`` and ``module`` at the start and,
at the end, token usage, the request's sampling parameters, the model, the finish reason and the
``gen_ai.latency.*`` figures; a request aborted before it ran gets only the latencies, as in SGLang.
No prompt or output text is ever recorded.

Like SGLang: the role is empty outside PD disaggregation (hence the leading space in the root's
name); trace ids are 64-bit random numbers (SGLang's own id generator) unless a ``traceparent``
supplies one; only ``traceparent`` and ``tracestate`` are read, nothing is echoed back;
``SGLANG_TRACE_LEVEL`` (default 3) drops stages above it; service.name is ``--otlp-service-name``, else
``OTEL_SERVICE_NAME``, else "sglang"; the exporter is OTLP gRPC unless
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``, and the endpoint is handed to it as given (for
HTTP: the whole URL, ``http://host:4318/v1/traces``); spans leave through a BatchSpanProcessor with
``SGLANG_OTLP_EXPORTER_SCHEDULE_DELAY_MILLIS`` (500) and ``SGLANG_OTLP_EXPORTER_MAX_EXPORT_BATCH_SIZE``
(64). Unlike SGLang: only the HTTP exporter is installed, so the gRPC protocol is refused at start-up;
when the SGLANG_ variables are unset, ``OTEL_BSP_SCHEDULE_DELAY``/``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``
are honoured (SGLang always passes its own values); tokenizer and scheduler share one process, so
both report the same pid.

Nothing here is imported by the simulator unless ``--enable-trace`` is given; opentelemetry is
imported only by :class:`Tracing`.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The only request headers SGLang reads for tracing (W3C Trace Context).
TRACE_HEADERS = ("traceparent", "tracestate")
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
GRPC_REFUSED = (
    "--enable-trace: OTLP over gRPC (SGLang's default protocol) is not available in the simulated worker; "
    f"set {PROTOCOL_ENV}=http/protobuf and give --otlp-traces-endpoint as the full URL "
    "(e.g. http://127.0.0.1:4318/v1/traces)"
)
#: What SGLang's scheduler records when a request's scheduler-side span is closed by garbage collection.
UNCLOSED = "have unclosed span, auto closed"
#: Sampling parameters copied to the root span (only when truthy, as SGLang does).
SAMPLING_ATTRS = (
    ("max_new_tokens", "gen_ai.request.max_tokens"),
    ("top_p", "gen_ai.request.top_p"),
    ("temperature", "gen_ai.request.temperature"),
    ("top_k", "gen_ai.request.top_k"),
    ("n", "gen_ai.request.n"),
)


class TracingError(Exception):
    """Tracing cannot start (the simulated worker refuses to run, as SGLang's launch fails)."""


@dataclass
class TraceOrigin:
    """What the HTTP handler knows about a request for its trace."""

    headers: dict[str, str]  # traceparent / tracestate only
    received_ns: int
    #: The request's sampling parameters as SGLang's tokenizer manager holds them (before defaults).
    sampling: dict[str, Any] = field(default_factory=dict)


def trace_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: headers[name] for name in TRACE_HEADERS if name in headers}


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


def _bsp_setting(sglang_name: str, otel_name: str, sglang_default: int) -> int | None:
    """SGLang's variable if set; else None (the SDK reads the standard one) if that is set; else SGLang's default."""
    value = _env_int(sglang_name)
    if value is not None:
        return value
    return None if os.environ.get(otel_name, "").strip() else sglang_default


def _host_id() -> str:
    try:
        with open("/etc/machine-id") as f:
            machine = f.read().strip()
        if machine:
            return machine
    except OSError:
        pass
    mac = uuid.getnode()
    return uuid.UUID(int=mac).hex if mac else "unknown"


class Tracing:
    """The process's tracer provider and exporter (SGLang's ``process_tracing_init``)."""

    def __init__(self, endpoint: str, service_name: str | None, served_model_name: str) -> None:
        protocol = os.environ.get(PROTOCOL_ENV, "grpc")
        if protocol == "grpc":
            raise TracingError(GRPC_REFUSED)
        if protocol != "http/protobuf":
            raise TracingError(
                f"Unsupported OTLP protocol '{protocol}' configured. Supported protocols are: grpc, http/protobuf"
            )
        try:
            from opentelemetry import trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.id_generator import IdGenerator
            from opentelemetry.trace import Link, Status, StatusCode
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as missing:
            raise TracingError(
                f"--enable-trace needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http ({missing})"
            ) from None

        class SixtyFourBitIds(IdGenerator):
            """SGLang draws trace and span ids as 64-bit numbers from its own generator."""

            def __init__(self) -> None:
                self.rng = random.Random()  # nosec B311  # ids, not secrets (as SGLang's)

            def generate_span_id(self) -> int:
                return self.rng.getrandbits(64) or 1

            def generate_trace_id(self) -> int:
                return self.rng.getrandbits(64) or 1

        name = service_name or os.environ.get("OTEL_SERVICE_NAME") or "sglang"
        processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=endpoint),  # the URL as given, as SGLang passes it
            schedule_delay_millis=_bsp_setting(
                "SGLANG_OTLP_EXPORTER_SCHEDULE_DELAY_MILLIS", "OTEL_BSP_SCHEDULE_DELAY", 500
            ),
            max_export_batch_size=_bsp_setting(
                "SGLANG_OTLP_EXPORTER_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 64
            ),
        )
        self.provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}), id_generator=SixtyFourBitIds())
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("sglang server")
        self.propagator = TraceContextTextMapPropagator()
        self.in_context = trace.set_span_in_context
        self.Link, self.error_status = Link, Status(StatusCode.ERROR)
        self.level = _env_int("SGLANG_TRACE_LEVEL")
        self.level = 3 if self.level is None else self.level
        self.served_model_name = served_model_name
        self.host_id = _host_id()
        self.pid = os.getpid()

    def origin(self, headers: Mapping[str, str]) -> TraceOrigin:
        return TraceOrigin(trace_headers(headers), time.time_ns())

    def start(self, rid: str, origin: TraceOrigin | None) -> ReqTrace | None:
        if self.level <= 0:
            return None
        return ReqTrace(self, rid, origin or TraceOrigin({}, time.time_ns()))

    def shutdown(self) -> None:
        """Export what is buffered, then stop."""
        self.provider.shutdown()


class _Part:
    """One process's share of a request (SGLang's thread context): its span and its open stages."""

    def __init__(self, tracing: Tracing, label: str, ranks: dict[str, int], parent: Any, after: Any, ts: int) -> None:
        self.t = tracing
        shown = "".join(f" [{key[:2].upper()} {value}] " for key, value in ranks.items())
        self.span = tracing.tracer.start_span(
            f"{label}{shown}(host:{tracing.host_id[:8]} | pid:{tracing.pid})",
            context=parent,
            start_time=ts,
            attributes={**ranks, "host_id": tracing.host_id, "pid": tracing.pid, "thread_label": label},
        )
        self.stack: list[tuple[str, int, Any, int]] = []  # (name, level, span, start) of the open stages
        self.after = after  # the last top-level stage's SpanContext: the next one links to it
        self.events: list[tuple[str, int, dict[str, Any]]] = []  # (name, ts, attrs) not yet placed
        self.open_ = True

    def handoff(self) -> Any:
        """The stage the next process's first stage follows."""
        return self.stack[0][2].get_span_context() if self.stack else self.after

    def _start(self, name: str, ts: int) -> Any:
        parent = self.stack[-1][2] if self.stack else self.span
        links = [self.t.Link(self.after)] if not self.stack and self.after is not None else None
        return self.t.tracer.start_span(name, context=self.t.in_context(parent), start_time=ts, links=links)

    def _place_events(self, span: Any, start: int, end: int) -> None:
        keep = []
        for name, ts, attrs in self.events:
            if start <= ts < end:
                span.add_event(name, attributes=attrs, timestamp=ts)
            else:
                keep.append((name, ts, attrs))
        self.events = keep

    def _ended(self, span: Any, end: int) -> None:
        span.end(end_time=end)
        if not self.stack:
            self.after = span.get_span_context()

    def open(self, name: str, level: int, ts: int) -> None:
        if self.open_ and level <= self.t.level:
            self.stack.append((name, level, self._start(name, ts), ts))

    def close(self, name: str, level: int, ts: int) -> None:
        if not self.open_ or level > self.t.level or not self.stack or self.stack[-1][:2] != (name, level):
            return
        _, _, span, start = self.stack.pop()
        self._place_events(span, start, ts)
        self._ended(span, ts)

    def stage(self, name: str, level: int, start: int, end: int, attrs: dict[str, Any] | None = None) -> None:
        """A stage whose start and end are both known now."""
        if not self.open_ or level > self.t.level:
            return
        span = self._start(name, start)
        if attrs:
            span.set_attributes(attrs)
        self._place_events(span, start, end)
        self._ended(span, end)

    def event(self, name: str, level: int, ts: int, attrs: dict[str, Any] | None = None) -> None:
        if self.open_ and level <= self.t.level:
            self.events.append((name, ts, attrs or {}))

    def end(self, ts: int, reason: str | None = None) -> None:
        """Close every open stage, then this part's span (in error, with a reason, when aborted)."""
        if not self.open_:
            return
        self.open_ = False
        while self.stack:
            self.stack.pop()[2].end(end_time=ts)
        if reason is not None:
            self.span.set_status(self.t.error_status)
            self.span.set_attributes({"reason": reason})
        for name, when, attrs in self.events:
            self.span.add_event(name, attributes=attrs, timestamp=when)
        self.events = []
        self.span.end(end_time=ts)


class ReqTrace:
    """One request's spans, driven by the moments SGLang's tokenizer manager and scheduler record."""

    def __init__(self, tracing: Tracing, rid: str, origin: TraceOrigin) -> None:
        self.t = tracing
        self.rid = rid
        self.sampling = origin.sampling
        ts = origin.received_ns
        short = rid.split("_")[-1]  # SGLang drops a multi-tokenizer worker prefix
        self.root = tracing.tracer.start_span(
            f" Req {short[:8]}",
            context=tracing.propagator.extract(origin.headers),
            start_time=ts,
            attributes={"rid": short, "module": "sglang::request"},
        )
        self.root_context = tracing.in_context(self.root)
        self.tokenizer = _Part(tracing, "Tokenizer", {}, self.root_context, None, ts)
        self.tokenizer.open("tokenize", 1, ts)
        self.scheduler: _Part | None = None
        self.ended = False
        self.retractions = 0
        # the tokenizer's moments (ns; 0 = not yet)
        self.created, self.dispatched_at, self.first_token = ts, 0, 0
        # the scheduler's moments, as SchedulerReqTimeStats keeps them
        self.recv = self.wait_entry = self.forward_entry = self.last_forward_entry = 0
        self.prefill_done = self.last_prefill_done = self.last_decode_scheduled = self.last_decode_done = 0
        self.decode_ct = 0

    # -- tokenizer --------------------------------------------------------------------------------

    def tokenized(self, ts: int) -> None:
        self.tokenizer.close("tokenize", 1, ts)

    def dispatched(self, ts: int) -> None:
        """Handed to the scheduler, which receives it at once: the tokenizer's part ends."""
        self.tokenizer.open("api_server_dispatch", 2, ts)
        after = self.tokenizer.handoff()
        self.tokenizer.close("api_server_dispatch", 2, ts)
        self.tokenizer.end(ts)
        self.dispatched_at = ts
        self.recv = ts
        self.scheduler = _Part(self.t, "Scheduler", {"tp_rank": 0, "pp_rank": 0}, self.root_context, after, ts)

    # -- scheduler ---------------------------------------------------------------------------------

    def queued(self, ts: int) -> None:
        """Entered the waiting queue: first from the tokenizer, again after a retraction."""
        if self.scheduler is None:
            return
        if self.wait_entry == 0:
            self.scheduler.stage("request_process", 2, self.recv, ts)
        else:
            self.last_forward_entry = self.last_prefill_done = self.last_decode_done = 0
            self.last_decode_scheduled = 0
            self.scheduler.event("retract", 1, ts)
        self.wait_entry = ts

    def scheduled(self, prefill: bool, ts: int, attrs: dict[str, Any]) -> None:
        """In a batch about to run (after forward entry, for a prefill)."""
        s = self.scheduler
        if s is None:
            return
        if prefill:
            if self.forward_entry == 0:
                self.forward_entry = self.last_forward_entry = ts
                s.stage("prefill_waiting", 1, self.wait_entry, ts)
                s.open("prefill_forward", 1, ts)
            elif self.last_forward_entry == 0:
                self.last_forward_entry = ts
        elif self.last_decode_scheduled == 0 and self.last_prefill_done > 0:
            s.stage("decode_waiting", 1, self.last_prefill_done, ts)
            s.open("decode_forward", 1, ts)
            self.last_decode_done = ts
        s.event("schedule", 3, ts, attrs)
        if not prefill:
            self.last_decode_scheduled = ts

    def prefill_finished(self, ts: int) -> None:
        s = self.scheduler
        if s is None:
            return
        self.first_token = self.first_token or ts
        if self.prefill_done == 0:
            self.prefill_done = self.last_prefill_done = ts
            s.close("prefill_forward", 1, ts)
        elif self.last_prefill_done == 0:  # prefilled again after a retraction
            self.last_prefill_done = ts
            s.stage("prefill_forward", 1, self.last_forward_entry, ts)

    def decode_finished(self, ts: int) -> None:
        if self.scheduler is None:
            return
        last, self.last_decode_done = self.last_decode_done, ts
        if last == 0:
            last = max(self.last_prefill_done, self.last_decode_scheduled)
        self.scheduler.stage("decode_loop", 3, last, ts, {"decode_ct": self.decode_ct})
        self.decode_ct += 1

    def completed(self, ts: int) -> None:
        """Left the running batch (finished, or aborted after a step)."""
        if self.scheduler is not None:
            self.scheduler.end(ts)

    def refused(self, ts: int, reason: str) -> None:
        """Taken out of the waiting queue by the scheduler (queue full, a more important arrival)."""
        if self.scheduler is not None:
            self.scheduler.end(ts, reason)

    # -- the end -----------------------------------------------------------------------------------

    def finish(self, ts: int, outcome: dict[str, Any] | None) -> None:
        """The tokenizer hears the request ended; ``outcome`` is None for an abort before any output."""
        if self.ended:
            return
        self.ended = True
        if self.scheduler is not None:
            self.scheduler.end(ts, UNCLOSED)
        self.tokenizer.end(ts)
        attrs = self._outcome_attrs(outcome) if outcome is not None else {}
        attrs.update(self._latencies(ts))
        self.root.set_attributes(attrs)
        self.root.end(end_time=ts)

    def _outcome_attrs(self, outcome: dict[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "gen_ai.usage.completion_tokens": outcome["completion_tokens"],
            "gen_ai.usage.prompt_tokens": outcome["prompt_tokens"],
            "gen_ai.usage.cached_tokens": outcome["cached_tokens"],
            "gen_ai.request.id": self.rid,
        }
        for key, name in SAMPLING_ATTRS:
            value = self.sampling.get(key)
            if value and isinstance(value, str | int | float):
                attrs[name] = value
        attrs["gen_ai.response.model"] = self.t.served_model_name
        if outcome.get("finish_reason"):
            attrs["gen_ai.response.finish_reasons"] = json.dumps([outcome["finish_reason"]])
        return attrs

    def _latencies(self, finished: int) -> dict[str, float]:
        s = 1e-9
        out: dict[str, float] = {}
        if self.first_token:
            out["gen_ai.latency.time_to_first_token"] = (self.first_token - self.created) * s
        out["gen_ai.latency.e2e"] = (finished - self.created) * s
        if self.first_token:
            out["gen_ai.latency.time_in_model_decode"] = (finished - self.first_token) * s
        if self.dispatched_at:
            out["gen_ai.latency.time_in_model_inference"] = (finished - self.dispatched_at) * s
            if self.first_token:
                out["gen_ai.latency.time_in_model_prefill"] = (self.first_token - self.dispatched_at) * s
        return out

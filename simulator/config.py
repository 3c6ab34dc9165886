"""The simulator's settings and its command line, shared by both entry points.

``python -m simulator`` and ``manage.py run_simulated_engine`` both call
:func:`add_arguments` on their parser and :func:`config_from_args` on the result, so the two accept
exactly the same options. Option names follow SGLang's ``launch_server`` where one exists.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from pathlib import Path

from simulator.radix_cache import EVICTION_POLICIES, IMPLEMENTED_EVICTION_POLICIES, unimplemented_policy_message
from simulator.timing import SPEED_PRESETS, TimingModel

MODEL_DIR = Path(__file__).resolve().parent / "model"
VERSION = "0.5.23"  # the SGLang release whose protocol this simulator follows


@dataclass
class Faults:
    latency_s: float = 0.0  # added before each request enters the queue
    error_rate: float = 0.0  # fraction of generation requests that fail
    error_status: int = 500
    die_after_tokens: int | None = None  # the process exits once a request has produced N tokens
    hang_after_tokens: int | None = None  # the engine stops stepping once a request has produced N
    #: A labelled "degraded" version (--degraded): more failures, slower, and answers that miss references
    #: (an echo loses its last word, so a reference or a JSON object is no longer met): for rollout tests.
    degraded: bool = False

    def describe(self) -> list[str]:
        out = ["DEGRADED (a simulated bad version)"] if self.degraded else []
        if self.latency_s:
            out.append(f"latency +{self.latency_s}s")
        if self.error_rate:
            out.append(f"error rate {self.error_rate:.0%} (HTTP {self.error_status})")
        if self.die_after_tokens is not None:
            out.append(f"dies after {self.die_after_tokens} tokens")
        if self.hang_after_tokens is not None:
            out.append(f"hangs after {self.hang_after_tokens} tokens")
        return out


@dataclass
class SimulatorConfig:
    host: str = "127.0.0.1"
    port: int = 30000
    model_path: str = str(MODEL_DIR)
    served_model_name: str = "sim-small"
    api_key: str | None = None
    admin_api_key: str | None = None
    context_length: int = 32768
    max_total_tokens: int = 131072
    max_running_requests: int = 64
    max_queued_requests: int | None = None
    max_prefill_tokens: int = 16384
    page_size: int = 1
    disable_radix_cache: bool = False
    #: SGLang's --radix-eviction-policy: "lru" (its default) or "priority" (lowest request priority first).
    radix_eviction_policy: str = "lru"
    schedule_policy: str = "fcfs"
    #: SGLang's --enable-priority-scheduling and --schedule-low-priority-values-first.
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    schedule_conservativeness: float = 1.0
    enable_metrics: bool = False
    enable_cache_report: bool = False
    incremental_streaming_output: bool = False
    stream_interval: int = 1
    speed: str = "realistic"
    timing: TimingModel = field(default_factory=lambda: SPEED_PRESETS["realistic"])
    startup_delay_s: float = 0.0
    echo: bool = False
    #: Guard mode (simulated, not a model): keyword -> category code, answered in Llama Guard's format.
    guard_keywords: dict[str, str] = field(default_factory=dict)
    answer_tokens: tuple[int, int] = (24, 184)
    random_seed: int = 42
    faults: Faults = field(default_factory=Faults)
    log_level: str = "warning"
    #: SGLang's --tool-call-parser: None (tool calls stay raw text in `content`) or "qwen".
    tool_call_parser: str | None = None
    #: SGLang's --grammar-backend: "none" refuses every grammar (json_schema, regex, ebnf).
    grammar_backend: str = "xgrammar"
    #: SGLang's --is-embedding: serve /v1/embeddings and /encode instead of generating (simulator.embedding).
    is_embedding: bool = False
    #: SGLang's --enable-multimodal: the model understands images (simulator.vision); off, it is text-only.
    enable_multimodal: bool = False
    embedding_dim: int = 384
    #: The sizes `dimensions` may ask for; empty: not a Matryoshka model, `dimensions` is refused.
    matryoshka_dimensions: tuple[int, ...] = ()
    #: SGLang's --enable-trace, --otlp-traces-endpoint and --otlp-service-name (simulator.tracing).
    enable_trace: bool = False
    otlp_traces_endpoint: str = "localhost:4317"
    otlp_service_name: str | None = None

    def __post_init__(self) -> None:
        if self.context_length > self.max_total_tokens:
            # One request must always fit in the KV pool on its own (SGLang caps it the same way).
            self.context_length = self.max_total_tokens
        if self.max_running_requests < 1 or self.page_size < 1 or self.stream_interval < 1:
            raise ValueError("max_running_requests, page_size and stream_interval must be >= 1")
        low, high = self.answer_tokens
        if not 1 <= low <= high:
            raise ValueError("answer token bounds must satisfy 1 <= min <= max")
        if self.radix_eviction_policy not in IMPLEMENTED_EVICTION_POLICIES:
            raise ValueError(unimplemented_policy_message(self.radix_eviction_policy))
        if self.embedding_dim < 1 or any(not 1 <= d <= self.embedding_dim for d in self.matryoshka_dimensions):
            raise ValueError("embedding and Matryoshka dimensions must be between 1 and --embedding-dim")

    @property
    def new_token_ratio(self) -> float:
        return min(1.0, 0.7 * self.schedule_conservativeness)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option of the simulated worker (used by both entry points)."""
    d = SimulatorConfig()
    a = parser.add_argument
    a("--host", default=d.host, help="bind address (default %(default)s)")
    a("--port", type=int, default=d.port, help="port (default %(default)s, as SGLang)")
    a("--model-path", default=d.model_path, help="reported as model_path; an existing local dir keeps smg offline")
    a("--served-model-name", default=d.served_model_name, help="the model id in /v1/models (default %(default)s)")
    a("--api-key", default=None, help="require Authorization: Bearer KEY (health/metrics stay open)")
    a("--admin-api-key", default=None, help="key for admin routes (/abort_request, /flush_cache)")
    a("--context-length", type=int, default=d.context_length)
    a("--max-total-tokens", type=int, default=d.max_total_tokens, help="KV pool size in tokens")
    a("--max-running-requests", type=int, default=d.max_running_requests)
    a("--max-queued-requests", type=int, default=None, help="refuse with 503 beyond this many waiting")
    a("--max-prefill-tokens", type=int, default=d.max_prefill_tokens)
    a("--page-size", type=int, default=d.page_size, help="radix cache page size in tokens")
    a("--disable-radix-cache", action="store_true")
    a(
        "--radix-eviction-policy",
        choices=EVICTION_POLICIES,
        default=d.radix_eviction_policy,
        help="which cached prefix goes first when KV memory runs out: lru (default), or priority (the lowest "
        "request `priority` first, least recently used among equals; needs --enable-priority-scheduling, "
        "without it every prefix is priority 0); SGLang's lfu, slru and tlru are refused (not implemented)",
    )
    a("--schedule-policy", choices=["fcfs", "lpm"], default=d.schedule_policy)
    a(
        "--enable-priority-scheduling",
        action="store_true",
        help="order the waiting queue by each request's `priority` (larger first, as SGLang)",
    )
    a(
        "--schedule-low-priority-values-first",
        action="store_true",
        help="with priority scheduling, smaller `priority` values go first",
    )
    a("--schedule-conservativeness", type=float, default=d.schedule_conservativeness)
    a("--enable-metrics", action="store_true", help="serve Prometheus /metrics")
    a("--enable-cache-report", action="store_true", help="usage.prompt_tokens_details.cached_tokens in OpenAI replies")
    a("--incremental-streaming-output", action="store_true", help="/generate chunks carry only new text")
    a("--stream-interval", type=int, default=d.stream_interval)
    e = parser.add_argument_group("embedding")
    e.add_argument(
        "--is-embedding",
        action="store_true",
        help="an embedding server: /v1/embeddings and /encode (lexical hashed vectors, not a model's), no generation",
    )
    e.add_argument("--embedding-dim", type=int, default=d.embedding_dim, help="vector size (default %(default)s)")
    e.add_argument(
        "--matryoshka-dimensions",
        default="",
        metavar="N,N,...",
        help="sizes a request's `dimensions` may ask for (empty: refused, as by a non-Matryoshka model)",
    )
    v = parser.add_argument_group("vision")
    v.add_argument(
        "--enable-multimodal",
        action="store_true",
        help="a vision model: chat accepts image_url parts (data: URLs) and counts Qwen2-VL's image tokens; "
        "/model_info reports has_image_understanding (off: text-only, images refused with SGLang's 400)",
    )
    r = parser.add_argument_group("tracing")
    r.add_argument(
        "--enable-trace",
        action="store_true",
        help="export OpenTelemetry spans of each generation request as SGLang does (simulator.tracing); "
        "only OTLP/HTTP is available: needs OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf",
    )
    r.add_argument(
        "--otlp-traces-endpoint",
        default=d.otlp_traces_endpoint,
        help="where --enable-trace sends spans (default %(default)s); used as given, as by SGLang, so with "
        "http/protobuf give the whole URL, e.g. http://127.0.0.1:4318/v1/traces",
    )
    r.add_argument(
        "--otlp-service-name",
        default=None,
        help="the spans' service.name (unset: OTEL_SERVICE_NAME, then 'sglang')",
    )
    t = parser.add_argument_group("timing")
    t.add_argument(
        "--speed",
        choices=sorted(SPEED_PRESETS),
        default=d.speed,
        help="timing preset (default %(default)s; 'instant' charges no time)",
    )
    t.add_argument("--prefill-base-time", type=float, default=None, help="seconds per prefill batch")
    t.add_argument("--prefill-time-per-token", type=float, default=None, help="seconds per uncached prompt token")
    t.add_argument("--decode-step-time", type=float, default=None, help="seconds per decode step")
    t.add_argument("--decode-time-per-request", type=float, default=None, help="extra seconds per request in the batch")
    t.add_argument("--decode-time-per-context-token", type=float, default=None)
    t.add_argument("--health-poll-interval", type=float, default=None, help="how often /health checks for output")
    t.add_argument("--startup-delay", type=float, default=0.0, help="seconds /health answers 503 (loading)")
    g = parser.add_argument_group("output")
    g.add_argument("--echo", action="store_true", help="answer with the last user message instead of prose")
    g.add_argument(
        "--guard-keywords",
        default="",
        metavar="WORD=S1,...",
        help="simulated guard mode (a keyword policy, not a model): answer every request in Llama "
        "Guard's format, 'safe', or 'unsafe' and the codes of the keywords found in the "
        "conversation",
    )
    g.add_argument(
        "--tool-call-parser",
        choices=["qwen", "qwen25"],
        default=None,
        help="parse the model's <tool_call> blocks into OpenAI tool_calls, as SGLang's qwen parser "
        "(qwen25 is its deprecated alias); unset, as in SGLang, tool calls stay raw text",
    )
    g.add_argument(
        "--grammar-backend",
        choices=["xgrammar", "outlines", "llguidance", "none"],
        default=d.grammar_backend,
        help="as SGLang's: every backend but none constrains output with the simulator's own grammar "
        "engine (simulator.grammar); none refuses grammar requests with SGLang's 400",
    )
    g.add_argument("--min-answer-tokens", type=int, default=d.answer_tokens[0])
    g.add_argument("--max-answer-tokens", type=int, default=d.answer_tokens[1])
    g.add_argument("--random-seed", type=int, default=d.random_seed)
    f = parser.add_argument_group("fault injection")
    f.add_argument("--fault-latency", type=float, default=0.0, help="extra seconds before each request is queued")
    f.add_argument("--fault-error-rate", type=float, default=0.0, help="fraction of requests that fail")
    f.add_argument("--fault-error-status", type=int, default=500, help="status of injected failures")
    f.add_argument("--fault-die-after-tokens", type=int, default=None, help="exit the process mid-stream")
    f.add_argument("--fault-hang-after-tokens", type=int, default=None, help="stop stepping (0: before any token)")
    f.add_argument("--fault-hang", action="store_true", help="same as --fault-hang-after-tokens 0")
    f.add_argument(
        "--degraded",
        action="store_true",
        help=(
            "a labelled bad version, for rollout tests: fails DEGRADED_ERROR_RATE of requests (unless "
            "--fault-error-rate says otherwise), is slower to its first token and between tokens, and an "
            "--echo answer loses its last word"
        ),
    )
    a(
        "--accept-any-model",
        action="store_true",
        help="accepted for compatibility and has no effect: like SGLang, the simulator never checks the model name",
    )
    a("--log-level", default=d.log_level, choices=["debug", "info", "warning", "error"])


def parse_guard_keywords(value: str) -> dict[str, str]:
    """`"heist=S2,cliff jump=S11"` -> {"heist": "S2", "cliff jump": "S11"}."""
    policy = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        word, sep, code = item.rpartition("=")
        if not sep or not word.strip() or not code.strip():
            raise ValueError(f"--guard-keywords: {item!r} is not WORD=CODE")
        policy[word.strip().lower()] = code.strip()
    return policy


def parse_dimensions(value: str) -> tuple[int, ...]:
    """`"128,256"` -> (128, 256)."""
    try:
        return tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"--matryoshka-dimensions: {value!r} is not a comma-separated list of integers") from exc


#: What --degraded does unless the fault flags say otherwise: the share of requests failed, the seconds
#: added before each is queued, and how many times slower (and at least how slow) each decode step is.
DEGRADED_ERROR_RATE = 0.3
DEGRADED_LATENCY_S = 0.3
DEGRADED_DECODE_FACTOR = 4.0
DEGRADED_DECODE_STEP_S = 0.02


def degraded_timing(timing: TimingModel) -> TimingModel:
    return replace(timing, decode_base_s=max(timing.decode_base_s * DEGRADED_DECODE_FACTOR, DEGRADED_DECODE_STEP_S))


def config_from_args(ns: argparse.Namespace) -> SimulatorConfig:
    timing = SPEED_PRESETS[ns.speed].with_overrides(
        prefill_base_s=ns.prefill_base_time,
        prefill_per_token_s=ns.prefill_time_per_token,
        decode_base_s=ns.decode_step_time,
        decode_per_request_s=ns.decode_time_per_request,
        decode_per_context_token_s=ns.decode_time_per_context_token,
        health_poll_s=ns.health_poll_interval,
    )
    hang = 0 if ns.fault_hang else ns.fault_hang_after_tokens
    error_rate, latency = ns.fault_error_rate, ns.fault_latency
    if ns.degraded:
        timing = degraded_timing(timing)
        error_rate = error_rate or DEGRADED_ERROR_RATE
        latency = latency or DEGRADED_LATENCY_S
    return SimulatorConfig(
        host=ns.host,
        port=ns.port,
        model_path=ns.model_path,
        served_model_name=ns.served_model_name,
        api_key=ns.api_key,
        admin_api_key=ns.admin_api_key,
        context_length=ns.context_length,
        max_total_tokens=ns.max_total_tokens,
        max_running_requests=ns.max_running_requests,
        max_queued_requests=ns.max_queued_requests,
        max_prefill_tokens=ns.max_prefill_tokens,
        page_size=ns.page_size,
        disable_radix_cache=ns.disable_radix_cache,
        radix_eviction_policy=ns.radix_eviction_policy,
        schedule_policy=ns.schedule_policy,
        enable_priority_scheduling=ns.enable_priority_scheduling,
        schedule_low_priority_values_first=ns.schedule_low_priority_values_first,
        schedule_conservativeness=ns.schedule_conservativeness,
        enable_metrics=ns.enable_metrics,
        enable_cache_report=ns.enable_cache_report,
        incremental_streaming_output=ns.incremental_streaming_output,
        stream_interval=ns.stream_interval,
        speed=ns.speed,
        timing=timing,
        startup_delay_s=ns.startup_delay,
        echo=ns.echo,
        guard_keywords=parse_guard_keywords(ns.guard_keywords),
        answer_tokens=(ns.min_answer_tokens, ns.max_answer_tokens),
        random_seed=ns.random_seed,
        faults=Faults(
            latency_s=latency,
            error_rate=error_rate,
            error_status=ns.fault_error_status,
            die_after_tokens=ns.fault_die_after_tokens,
            hang_after_tokens=hang,
            degraded=ns.degraded,
        ),
        log_level=ns.log_level,
        tool_call_parser="qwen" if ns.tool_call_parser else None,
        grammar_backend=ns.grammar_backend,
        is_embedding=ns.is_embedding,
        enable_multimodal=ns.enable_multimodal,
        embedding_dim=ns.embedding_dim,
        matryoshka_dimensions=parse_dimensions(ns.matryoshka_dimensions),
        enable_trace=ns.enable_trace,
        otlp_traces_endpoint=ns.otlp_traces_endpoint,
        otlp_service_name=ns.otlp_service_name,
    )


def build_parser(prog: str = "python -m simulator") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="A simulated SGLang worker (no GPU needed).")
    add_arguments(parser)
    return parser

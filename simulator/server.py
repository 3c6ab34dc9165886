"""The simulated worker's HTTP application (Starlette on uvicorn, as SGLang is FastAPI on uvicorn).

Same stack, same disconnect behaviour: a streaming response's body iterator is cancelled when the
client goes away, and the simulator turns that into an abort, as SGLang does.
"""

from __future__ import annotations

import asyncio
import hmac
import shlex
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from simulator.config import VERSION, SimulatorConfig
from simulator.embedding import EmbeddingAPI, not_embedding, not_generation
from simulator.engine import Engine
from simulator.native_api import NativeAPI
from simulator.openai_api import OpenAIAPI
from simulator.sampling import model_defaults
from simulator.tokenize_api import TokenizeAPI

#: Routes that need the admin key when one is set (SGLang 0.5.23's admin-level routes we serve).
ADMIN_PATHS = frozenset({"/abort_request", "/flush_cache"})
#: Path prefixes open to everyone, for probes and scrapers.
OPEN_PREFIXES = ("/health", "/ready", "/metrics")
FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


class ApiKeyMiddleware:
    """Bearer-key check with SGLang's exemptions; 401 {"error": "Unauthorized"} otherwise."""

    def __init__(self, app: ASGIApp, api_key: str | None, admin_api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key
        self.admin_api_key = admin_api_key

    def _required(self, path: str) -> str | None:
        if path in ADMIN_PATHS:
            return self.admin_api_key or self.api_key
        return self.api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or scope["path"].startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        key = self._required(scope["path"])
        if key is not None:
            header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            if not hmac.compare_digest(header.encode(), f"Bearer {key}".encode()):
                await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class InfoAPI:
    """Health, metadata, load, metrics and cache control."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.cfg: SimulatorConfig = engine.config

    async def health(self, request: Request) -> Response:
        healthy = await self.engine.health_check(self.engine.trace_origin(request.headers))
        return Response(status_code=200 if healthy else 503)

    async def ready(self, request: Request) -> Response:
        return Response(status_code=503 if self.engine.starting else 200)

    async def ping(self, request: Request) -> Response:
        return Response(status_code=200)

    def _model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.cfg.model_path,
            "served_model_name": self.cfg.served_model_name,
            "tokenizer_path": self.cfg.model_path,
            "is_generation": not self.cfg.is_embedding,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "dummy",
            "reasoning_parser": None,
            "tool_call_parser": self.cfg.tool_call_parser,
            "disaggregation_mode": "null",
            "has_image_understanding": self.cfg.enable_multimodal and not self.cfg.is_embedding,
            "has_audio_understanding": False,
            "model_type": "sglchat-simulated",
            "architectures": ["SimulatedEmbeddingModel" if self.cfg.is_embedding else "SimulatedForCausalLM"],
        }

    async def model_info(self, request: Request) -> Response:
        return JSONResponse(self._model_info())

    async def server_info(self, request: Request) -> Response:
        cfg, load = self.cfg, self.engine.load()
        args = {k: v for k, v in asdict(cfg).items() if k not in ("api_key", "admin_api_key", "timing", "faults")}
        args["answer_tokens"] = list(cfg.answer_tokens)
        info: dict[str, Any] = {
            **args,
            "tokenizer_path": cfg.model_path,
            "tp_size": 1,
            "dp_size": 1,
            "pp_size": 1,
            "load_balance_method": "round_robin",
            "disaggregation_mode": "null",
            "chunked_prefill_size": -1,
            "max_req_input_len": cfg.context_length - 1,
            "status": "Starting" if self.engine.starting else "Up",
            "max_total_num_tokens": cfg.max_total_tokens,
            "startup_time": round(self.engine.startup_unix, 3),
            "launch_command": shlex.join(sys.argv),
            "internal_states": [
                {
                    "last_gen_throughput": load["gen_throughput"],
                    "load": load["legacy_num_tokens"],
                    "memory_usage": {"token_capacity": cfg.max_total_tokens},
                }
            ],
            "version": VERSION,
            "frontend": "python",
            "simulated": True,
            "simulated_degraded": cfg.faults.degraded,
            "timing": asdict(cfg.timing),
            "faults": cfg.faults.describe(),
        }
        return JSONResponse(info)

    async def loads(self, request: Request) -> Response:
        load = self.engine.load()
        include = {part.strip() for part in request.query_params.get("include", "core").split(",")}
        now = datetime.now(UTC).isoformat()
        entry: dict[str, Any] = {
            "timestamp": now,
            "dp_rank": 0,
            **{
                k: load[k]
                for k in (
                    "num_running_reqs",
                    "num_waiting_reqs",
                    "num_waiting_uncached_tokens",
                    "num_used_tokens",
                    "num_total_tokens",
                    "max_total_num_tokens",
                    "max_running_requests",
                    "token_usage",
                    "gen_throughput",
                    "cache_hit_rate",
                )
            },
            "num_active_tokens": load["num_used_tokens"],
            "num_prealloc_ready_tokens": 0,
            "utilization": round(load["num_running_reqs"] / load["max_running_requests"], 4),
            "total_prefill_uncached_tokens": int(
                self.engine.metrics.histograms["sglang:uncached_prompt_tokens_histogram"].total
            ),
            "total_prefill_busy_us": 0,
            "decode_moments": None,
        }
        if include & {"memory", "all"}:
            entry["memory"] = {
                "kv_evictable_tokens": load["num_evictable_tokens"],
                "kv_available_tokens": load["num_available_tokens"],
                "radix_cache_tokens": load["num_cached_tokens"],
            }
        if include & {"queues", "all"}:
            entry["queues"] = {
                "waiting": load["num_waiting_reqs"],
                "grammar": 0,
                "paused": 0,
                "retracted": load["num_retracted_reqs"],
                "prealloc_ready": 0,
            }
        return JSONResponse(
            {"timestamp": now, "version": VERSION, "accelerator": "simulated", "num_accelerators": 1, "loads": [entry]}
        )

    async def get_load(self, request: Request) -> Response:
        load = self.engine.load()
        return JSONResponse(
            [
                {
                    "dp_rank": 0,
                    "num_reqs": load["num_running_reqs"] + load["num_waiting_reqs"],
                    "num_waiting_reqs": load["num_waiting_reqs"],
                    "num_tokens": load["legacy_num_tokens"],
                }
            ]
        )

    async def metrics(self, request: Request) -> Response:
        if not self.cfg.enable_metrics:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        load = self.engine.load()
        gauges = {
            "sglang:num_running_reqs": load["num_running_reqs"],
            "sglang:num_queue_reqs": load["num_waiting_reqs"],
            "sglang:num_grammar_queue_reqs": 0,
            "sglang:token_usage": load["token_usage"],
            "sglang:num_used_tokens": load["num_used_tokens"],
            "sglang:kv_available_tokens": load["num_available_tokens"],
            "sglang:kv_evictable_tokens": load["num_evictable_tokens"],
            "sglang:gen_throughput": load["gen_throughput"],
            "sglang:cache_hit_rate": load["cache_hit_rate"],
            "sglang:max_total_num_tokens": load["max_total_num_tokens"],
            "sglang:num_retracted_reqs": load["num_retracted_reqs"],
        }
        self.engine.metrics.counters[("sglang:evicted_tokens_total", ())] = float(self.engine.cache.evicted_total)
        return PlainTextResponse(self.engine.metrics.render(gauges), media_type="text/plain; version=0.0.4")

    async def flush_cache(self, request: Request) -> Response:
        try:
            wait_s = float(request.query_params.get("timeout", "0"))
        except ValueError:
            wait_s = 0.0
        deadline = time.monotonic() + wait_s
        while not self.engine.scheduler.idle and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        flushed = self.engine.scheduler.flush_cache()
        return PlainTextResponse(FLUSH_TEXT, status_code=200 if flushed else 400)


def create_app(config: SimulatorConfig) -> Starlette:
    engine = Engine(config)
    defaults = model_defaults(config.model_path)
    native, openai, info = NativeAPI(engine, defaults), OpenAIAPI(engine, defaults), InfoAPI(engine)
    tokens = TokenizeAPI(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine.start()
        yield
        await engine.stop()

    routes = [
        Route("/health", info.health, methods=["GET"]),
        Route("/health_generate", info.health, methods=["GET"]),
        Route("/ready", info.ready, methods=["GET"]),
        Route("/ping", info.ping, methods=["GET"]),
        Route("/model_info", info.model_info, methods=["GET"]),
        Route("/get_model_info", info.model_info, methods=["GET"]),
        Route("/server_info", info.server_info, methods=["GET"]),
        Route("/get_server_info", info.server_info, methods=["GET"]),
        Route("/v1/loads", info.loads, methods=["GET"]),
        Route("/get_load", info.get_load, methods=["GET"]),
        Route("/metrics", info.metrics, methods=["GET"]),
        Route("/flush_cache", info.flush_cache, methods=["GET", "POST"]),
        Route("/abort_request", native.abort_request, methods=["POST"]),
        Route("/v1/models", openai.models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", openai.model, methods=["GET"]),
        Route("/v1/tokenize", tokens.tokenize, methods=["POST"]),
        Route("/tokenize", tokens.tokenize, methods=["POST"]),
        Route("/v1/detokenize", tokens.detokenize, methods=["POST"]),
        Route("/detokenize", tokens.detokenize, methods=["POST"]),
    ]
    if config.is_embedding:
        embedding = EmbeddingAPI(config)
        routes += [
            Route("/v1/embeddings", embedding.embeddings, methods=["POST"]),
            Route("/encode", embedding.encode, methods=["POST"]),
            Route("/generate", not_generation, methods=["POST", "PUT"]),
            Route("/v1/chat/completions", not_generation, methods=["POST"]),
            Route("/v1/completions", not_generation, methods=["POST"]),
        ]
    else:
        routes += [
            Route("/generate", native.generate, methods=["POST", "PUT"]),
            Route("/v1/chat/completions", openai.chat_completions, methods=["POST"]),
            Route("/v1/completions", openai.completions, methods=["POST"]),
            Route("/v1/embeddings", not_embedding, methods=["POST"]),
            Route("/encode", not_embedding, methods=["POST"]),
        ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.engine = engine
    app.add_middleware(ApiKeyMiddleware, api_key=config.api_key, admin_api_key=config.admin_api_key)
    return app

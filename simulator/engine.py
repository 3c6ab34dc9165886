"""The simulated engine: drives the scheduler in (simulated) time and hands results to HTTP handlers.

This is the part of SGLang that the tokenizer manager and the scheduler process together provide:
requests come in with a rid, the scheduler loop runs batches, each request's handler is woken with
its latest state, and aborts, health probes, load figures and metrics come from the same state.
Everything runs on one asyncio event loop, so there is no locking: the scheduler is only touched
between awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulator.chat_template import last_user_text
from simulator.config import SimulatorConfig
from simulator.grammar import GrammarError, grammar_plan
from simulator.metrics import Metrics
from simulator.prose import Plan, ProseModel
from simulator.radix_cache import RadixCache
from simulator.request import Req, SamplingParams
from simulator.scheduler import Batch, QueueFull, Scheduler, SchedulerConfig

#: SGLang's refusal of a grammar request on a server launched with --grammar-backend none.
GRAMMAR_BACKEND_NONE = (
    "Grammar-based generation (json_schema, regex, ebnf, structural_tag) is not supported when the server "
    "is launched with --grammar-backend none"
)

log = logging.getLogger("simulator")

HEALTH_CHECK_TIMEOUT_S = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
HEALTH_RID_PREFIX = "HEALTH_CHECK_"
#: How often a non-streaming handler checks whether its client went away (SGLang's
#: SGLANG_REQUEST_STATE_WAIT_TIMEOUT).
DISCONNECT_POLL_S = 4.0


class RequestError(Exception):
    """A request refused before or instead of generation: status code plus SGLang's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Snapshot:
    """What a handler may show at one output: the first ``n_ids`` ids and ``text_len`` chars."""

    n_ids: int
    text_len: int
    finished: bool


class Handle:
    """A handler's view of one request: wait for news, read the latest snapshot."""

    def __init__(self, req: Req) -> None:
        self.req = req
        self.latest: Snapshot | None = None
        self.error: RequestError | None = None
        self._changed = asyncio.Event()

    def push(self, snapshot: Snapshot) -> None:
        self.latest = snapshot
        self._changed.set()

    def fail(self, error: RequestError) -> None:
        self.error = error
        self._changed.set()

    async def wait(self, timeout: float | None = None) -> Snapshot | None:
        """The newest snapshot (several outputs since the last call collapse into one)."""
        if timeout is None:
            await self._changed.wait()
        else:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                return None
        self._changed.clear()
        if self.error is not None:
            raise self.error
        return self.latest

    def text_at(self, snap: Snapshot) -> str:
        return self.req.visible_text() if snap.finished else self.req.text[: snap.text_len]

    def ids_at(self, snap: Snapshot) -> list[int]:
        return self.req.output_ids[: snap.n_ids]


@dataclass
class GenerateInput:
    prompt_ids: list[int]
    params: SamplingParams
    rid: str | None = None
    stream: bool = False
    namespace: str | None = None
    log_metrics: bool = True
    prompt_text: str | None = None
    #: SGLang's `priority` (meaningful with --enable-priority-scheduling).
    priority: int | None = None
    #: What the model writes instead of prose (a tool call); a grammar in params wins over it.
    plan: Plan | None = None
    #: Which of n choices this is (each samples differently).
    choice_index: int = 0
    #: With --enable-trace: the request's simulator.tracing.TraceOrigin (headers, arrival, sampling).
    trace: Any = None


class Engine:
    def __init__(self, config: SimulatorConfig) -> None:
        self.config = config
        self.cache = RadixCache(
            page_size=config.page_size,
            disabled=config.disable_radix_cache,
            eviction_policy=config.radix_eviction_policy,
        )
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_running_requests=config.max_running_requests,
                max_total_tokens=config.max_total_tokens,
                max_prefill_tokens=config.max_prefill_tokens,
                max_queued_requests=config.max_queued_requests,
                schedule_policy=config.schedule_policy,  # type: ignore[arg-type]
                enable_priority_scheduling=config.enable_priority_scheduling,
                schedule_low_priority_values_first=config.schedule_low_priority_values_first,
                new_token_ratio=config.new_token_ratio,
            ),
            self.cache,
            time.monotonic,
        )
        self.metrics = Metrics(config.served_model_name)
        self.handles: dict[str, Handle] = {}
        self.rng = random.Random(config.random_seed)  # nosec B311  # seeded on purpose: the simulated worker's text and faults must be reproducible
        self.fault_rng = random.Random(config.random_seed + 1)  # nosec B311  # seeded on purpose: the simulated worker's text and faults must be reproducible
        self.started_at = time.monotonic()
        self.startup_unix = time.time()
        self.last_output_at = 0.0
        self.frozen = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.tracing: Any = None  # a simulator.tracing.Tracing with --enable-trace
        if config.enable_trace:
            from simulator.tracing import Tracing

            self.tracing = Tracing(config.otlp_traces_endpoint, config.otlp_service_name, config.served_model_name)

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="simulated-scheduler")
        if self.config.faults.hang_after_tokens == 0:
            self.frozen = True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)  # export the spans still buffered

    @property
    def starting(self) -> bool:
        return time.monotonic() - self.started_at < self.config.startup_delay_s

    # -- requests ------------------------------------------------------------------------------------

    def trace_origin(self, headers: Mapping[str, str]) -> Any:
        """With --enable-trace, a TraceOrigin for a request arriving now (else None: nothing is done)."""
        return None if self.tracing is None else self.tracing.origin(headers)

    def validate(self, inp: GenerateInput) -> None:
        n = len(inp.prompt_ids)
        ctx = self.config.context_length
        if n == 0:
            raise RequestError(400, "The input is empty.")
        if n >= ctx:
            raise RequestError(400, f"The input ({n} tokens) is longer than the model's context length ({ctx} tokens).")
        max_new = inp.params.max_new_tokens
        if max_new < 0:
            raise RequestError(400, "max_new_tokens must be at least 0.")
        if n + max_new > ctx:
            raise RequestError(
                400,
                f"Requested token count exceeds the model's maximum context length of {ctx} tokens. "
                f"You requested a total of {n + max_new} tokens: {n} tokens from the input messages and "
                f"{max_new} tokens for the completion. Please reduce the number of tokens in the input "
                "messages or the completion to fit within the limit.",
            )
        if inp.rid is not None and inp.rid in self.handles:
            raise RequestError(400, f"Duplicate request ID detected: {inp.rid}")

    async def submit(self, inp: GenerateInput) -> Handle:
        """Queue a generation. Raises RequestError for refusals known before queueing."""
        self.validate(inp)
        rid = inp.rid or uuid.uuid4().hex
        p = inp.params
        if p.stream_interval is None:  # the request's own value wins over the server's --stream-interval
            p.stream_interval = self.config.stream_interval
        plan = inp.plan
        if p.grammar is not None:
            if self.config.grammar_backend == "none":
                raise RequestError(400, GRAMMAR_BACKEND_NONE)
            # SGLang compiles the grammar in the scheduler: a bad one fails the request after queueing
            # (a 400 before a non-streamed answer, an error event on an open stream).
            text = inp.prompt_text or ""
            try:
                plan = grammar_plan(*p.grammar, last_user_text(text) or text)
            except GrammarError as exc:
                raise RequestError(400, str(exc)) from None
        model = ProseModel(
            inp.prompt_ids,
            temperature=p.temperature,
            top_p=p.top_p,
            seed=p.sampling_seed,
            answer_tokens=self.config.answer_tokens,
            fallback_rng=self.rng,
            echo=self.config.echo,
            degraded=self.config.faults.degraded,
            prompt_text=inp.prompt_text,
            guard_keywords=self.config.guard_keywords,
            plan=plan,
            choice_index=inp.choice_index,
            logprobs=p.return_logprob,
            top_k=p.top_k,
            min_p=p.min_p,
        )
        req = Req(
            rid=rid,
            prompt_ids=list(inp.prompt_ids),
            params=p,
            model=model,
            stream=inp.stream,
            namespace=inp.namespace,
            log_metrics=inp.log_metrics,
            created=time.monotonic(),
            priority=inp.priority,
        )
        handle = Handle(req)
        self.handles[rid] = handle
        log.debug("submit %s (%d prompt tokens)", rid, len(req.prompt_ids))
        if self.tracing is not None:
            req.trace = self.tracing.start(rid, inp.trace)
            if req.trace is not None:
                req.trace.tokenized(time.time_ns())
        faults = self.config.faults
        if inp.log_metrics and faults.latency_s > 0:
            await asyncio.sleep(faults.latency_s)
        if handle.req.finished:  # aborted during the injected latency
            return handle
        if inp.log_metrics and faults.error_rate > 0 and self.fault_rng.random() < faults.error_rate:
            self._end_with_error(
                handle,
                RequestError(
                    faults.error_status,
                    f"Injected failure: the simulated engine failed this request (HTTP {faults.error_status}).",
                ),
            )
            return handle
        if req.trace is not None:
            req.trace.dispatched(time.time_ns())
        try:
            evicted = self.scheduler.add(req)
        except QueueFull as exc:
            if req.trace is not None:
                req.trace.refused(time.time_ns(), str(exc))
            self._end_with_error(handle, RequestError(503, str(exc)))
            return handle
        if evicted is not None and evicted.trace is not None:
            evicted.trace.refused(time.time_ns(), "The request is aborted by a higher priority request.")
            evicted.trace.finish(time.time_ns(), None)
        if evicted is not None and evicted.rid in self.handles:
            # A full queue and a more important arrival: the least important waiting request goes.
            self._end_with_error(
                self.handles[evicted.rid], RequestError(503, "The request is aborted by a higher priority request.")
            )
        if req.trace is not None:
            req.trace.queued(time.time_ns())
        self._wake.set()
        return handle

    def _end_with_error(self, handle: Handle, error: RequestError) -> None:
        handle.req.finish = {"type": "abort", "message": error.message, "status_code": error.status}
        if handle.req.trace is not None:
            handle.req.trace.finish(time.time_ns(), None)
        self.handles.pop(handle.req.rid, None)
        handle.fail(error)

    def abort(self, rid: str | None = None, *, abort_all: bool = False) -> None:
        """SGLang's /abort_request: prefix match; queued requests end now, running ones after a step."""
        if not rid and not abort_all:
            return
        for handle in list(self.handles.values()):
            req = handle.req
            pending = req not in self.scheduler.waiting and req not in self.scheduler.running
            if pending and not req.finished and (abort_all or req.rid.startswith(rid or "\0")):
                # Still in the injected-latency pause: it never reaches the queue.
                req.finish = {"type": "abort", "message": "Abort in waiting queue"}
                self._deliver([req])
        self._deliver(self.scheduler.abort(rid, abort_all=abort_all))
        self._wake.set()

    def release(self, handle: Handle) -> None:
        """A handler is done with its request (normally or because the client went away)."""
        log.debug("release %s (finished=%s)", handle.req.rid, handle.req.finished)
        if not handle.req.finished:
            self.abort(handle.req.rid)
        self.handles.pop(handle.req.rid, None)

    # -- the scheduler loop ------------------------------------------------------------------------

    async def _loop(self) -> None:
        timing = self.config.timing
        while True:
            if self.frozen:
                await asyncio.Event().wait()  # a hung GPU: nothing ever completes again
            batch = self.scheduler.next_batch()
            if batch is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            if batch.kind == "prefill":
                cost = timing.prefill_time(batch.uncached_tokens)
            else:
                cost = timing.decode_time(len(batch.reqs), batch.context_tokens)
            if self.tracing is not None:
                self._trace_scheduled(batch)
            previous = {id(r): r.last_token_at for r in batch.reqs}
            await asyncio.sleep(cost)
            changed = self.scheduler.complete(batch)
            if self.tracing is not None:
                self._trace_completed(batch)
            self._record_step(batch, previous)
            self._deliver(changed)
            self._check_faults(batch)

    def _trace_scheduled(self, batch: Batch) -> None:
        """SGLang's scheduling moments: retractions back to the queue, forward entry, the batch's event."""
        now = time.time_ns()
        for req in self.scheduler.waiting:
            if req.trace is not None and req.retractions > req.trace.retractions:
                req.trace.retractions = req.retractions
                req.trace.queued(now)
        prefill = batch.kind == "prefill"
        attrs = {"bid": uuid.uuid4().hex[:8], "batch_size": len(batch.reqs), "forward_mode": batch.kind}
        for req in batch.reqs:
            if req.trace is not None:
                req.trace.scheduled(prefill, now, attrs)

    def _trace_completed(self, batch: Batch) -> None:
        now = time.time_ns()
        for req in batch.reqs:
            if req.trace is None:
                continue
            if batch.kind == "prefill":
                req.trace.prefill_finished(now)
            else:
                req.trace.decode_finished(now)
            if req.finished:
                req.trace.completed(now)

    def _finish_trace(self, req: Req) -> None:
        finish = req.finish or {}
        if finish.get("message") == "Abort in waiting queue":
            req.trace.finish(time.time_ns(), None)  # SGLang's tokenizer hears only of the abort
            return
        outcome = {
            "prompt_tokens": len(req.prompt_ids),
            "completion_tokens": len(req.output_ids),
            "cached_tokens": req.cached_tokens or 0,
            "finish_reason": finish.get("type"),
        }
        req.trace.finish(time.time_ns(), outcome)

    def _record_step(self, batch: Batch, previous: dict[int, float | None]) -> None:
        now = time.monotonic()
        self.metrics.throughput.add(len(batch.reqs), now)
        for req in batch.reqs:
            if not req.log_metrics:
                continue
            before = previous[id(req)]
            if batch.kind == "decode" and before is not None and req.last_token_at is not None:
                self.metrics.observe("sglang:inter_token_latency_seconds", req.last_token_at - before)
        if batch.kind == "prefill":
            for req, extend in zip(batch.reqs, batch.extend_lens, strict=True):
                if req.log_metrics and req.first_token_at is not None and req.retractions == 0:
                    self.metrics.observe("sglang:time_to_first_token_seconds", req.first_token_at - req.created)
                    self.metrics.observe("sglang:queue_time_seconds", (req.forward_entry or now) - req.created)
                    self.metrics.observe("sglang:prompt_tokens_histogram", len(req.prompt_ids))
                    self.metrics.observe("sglang:uncached_prompt_tokens_histogram", extend)

    def _deliver(self, reqs: list[Req]) -> None:
        if reqs:
            self.last_output_at = time.monotonic()
        for req in reqs:
            if req.finished:
                self._record_finish(req)
                if req.trace is not None:
                    self._finish_trace(req)
            handle = self.handles.get(req.rid)
            if handle is not None and handle.req is req:
                handle.push(Snapshot(len(req.output_ids), len(req.text), req.finished))

    def _record_finish(self, req: Req) -> None:
        if not req.log_metrics:
            return
        m = self.metrics
        end = req.finished_at or time.monotonic()
        m.inc("sglang:num_requests_total", is_streaming=str(req.stream).lower())
        m.inc("sglang:prompt_tokens_total", len(req.prompt_ids))
        m.inc("sglang:generation_tokens_total", len(req.output_ids))
        m.inc("sglang:cached_tokens_total", req.cached_tokens or 0, cache_source="device")
        m.observe("sglang:e2e_request_latency_seconds", end - req.created)
        if len(req.output_ids) > 1 and req.first_token_at is not None:
            m.observe(
                "sglang:request_time_per_output_token_seconds", (end - req.first_token_at) / (len(req.output_ids) - 1)
            )
        if req.finish and req.finish.get("type") == "abort":
            m.inc("sglang:num_aborted_requests_total")

    def _check_faults(self, batch: Batch) -> None:
        faults = self.config.faults
        longest = max((len(r.output_ids) for r in batch.reqs if r.log_metrics), default=0)
        if faults.hang_after_tokens is not None and longest >= faults.hang_after_tokens:
            log.warning("fault injection: engine hangs after %d tokens", longest)
            self.frozen = True
        if faults.die_after_tokens is not None and longest >= faults.die_after_tokens:
            log.warning("fault injection: process dies after %d tokens", longest)
            self.frozen = True
            # Let handlers write what they have, then vanish without closing anything cleanly.
            asyncio.get_running_loop().call_later(0.2, os._exit, 1)

    # -- health ---------------------------------------------------------------------------------------

    async def health_check(self, trace: Any = None) -> bool:
        """SGLang's /health: run a 1-token probe; healthy once *any* output appears after it began.

        ``trace``: the probe's TraceOrigin with --enable-trace (SGLang traces its probes too)."""
        if self.starting:
            return False
        tic = time.monotonic()
        probe = GenerateInput(
            prompt_ids=[0],
            params=SamplingParams(max_new_tokens=1, temperature=0.0),
            rid=f"{HEALTH_RID_PREFIX}{time.time()}",
            log_metrics=False,
            trace=trace,
        )
        if trace is not None:
            trace.sampling = {"max_new_tokens": 1, "temperature": 0.0}
        handle = await self.submit(probe)
        try:
            while time.monotonic() < tic + HEALTH_CHECK_TIMEOUT_S:
                await asyncio.sleep(self.config.timing.health_poll_s)
                if self.last_output_at > tic:
                    return True
            return False
        finally:
            self.release(handle)

    # -- state for /v1/loads, /get_load, /metrics, /server_info ---------------------------------

    def load(self) -> dict[str, Any]:
        s, c, cfg = self.scheduler, self.cache, self.config
        used = c.protected_size + s.private_tokens  # KV in use, evictable cache excluded
        queued_prompt = sum(len(r.fill_ids) for r in s.waiting)
        return {
            "num_running_reqs": len(s.running),
            "num_waiting_reqs": len(s.waiting),
            "num_waiting_uncached_tokens": queued_prompt,
            "num_used_tokens": used,
            "num_total_tokens": cfg.max_total_tokens,
            "num_evictable_tokens": c.evictable_size,
            "num_available_tokens": s.free_tokens,
            "num_cached_tokens": c.total_size,
            "max_total_num_tokens": cfg.max_total_tokens,
            "max_running_requests": cfg.max_running_requests,
            "token_usage": round(used / cfg.max_total_tokens, 2),
            "gen_throughput": round(self.metrics.throughput.rate(), 2),
            "cache_hit_rate": round(s.last_prefill_hit_rate, 4),
            "num_retracted_reqs": s.retracted_total,
            "legacy_num_tokens": used + queued_prompt,
        }

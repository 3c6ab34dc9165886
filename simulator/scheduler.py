"""The continuous-batching scheduler: a synchronous state machine, driven in time by the engine.

It follows SGLang's event loop (``scheduler.py``, ``schedule_policy.py``) in the ways that shape
what clients see:

- a waiting queue and a running batch capped at ``max_running_requests``;
- each iteration runs *either* a prefill batch (new requests admitted from the queue, each producing
  its first token) *or* one decode step that advances every running request by one token; prefill
  goes first when something can be admitted, so new requests join between decode steps;
- admission needs KV room: free plus evictable tokens must hold the uncached prompt plus the
  clipped output estimate of the request and of those already running; the queue stops at the first
  request that doesn't fit (no overtaking under FCFS);
- after a prefill the prompt is inserted into the radix cache at once (``cache_unfinished_req``),
  so a concurrent request with the same prefix hits it; when a request ends (finished or aborted
  while running) its prompt and output, less the last sampled token, are inserted and its path is
  unlocked;
- a decode step that cannot get a KV slot per request evicts, then retracts requests to the queue
  (fewest output tokens first), counted in ``num_retractions``;
- an abort removes a queued request at once ("Abort in waiting queue"); a running one finishes after
  one more forward step ("Aborted"); rids match by prefix;
- with priority scheduling, the waiting queue is ordered by each request's ``priority`` first (larger
  values first unless ``schedule_low_priority_values_first``; a request without one is the least
  important); at ``max_queued_requests`` a strictly more important arrival takes the place of the least
  important waiting request (ended with 503 "The request is aborted by a higher priority request."),
  any other arrival is refused with 503 "The request queue is full." Running requests are not preempted
  for priority here (SGLang may preempt one when KV memory runs out; not simulated);
- what a request puts in the radix cache carries its ``priority`` (for ``--radix-eviction-policy
  priority``) only with priority scheduling on: without it every node is priority 0, as in SGLang.

Usage: ``next_batch()`` picks the work and reserves its memory; the engine waits the time the
timing model charges for it; ``complete(batch)`` applies the step. Requests added or aborted in
between take effect as they would on the real engine while a forward pass runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from simulator import tokenizer as tok
from simulator.radix_cache import RadixCache
from simulator.request import Req

#: lpm falls back to FCFS when more requests than this wait (as SGLang does).
LPM_FALLBACK_QUEUE_LEN = 128


class QueueFull(Exception):
    """The waiting queue is at ``max_queued_requests``."""


@dataclass
class SchedulerConfig:
    max_running_requests: int = 64
    max_total_tokens: int = 131072
    max_prefill_tokens: int = 16384
    max_queued_requests: int | None = None
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    schedule_policy: Literal["fcfs", "lpm"] = "fcfs"
    #: Fraction of each request's remaining output reserved at admission (SGLang's new_token_ratio).
    new_token_ratio: float = 0.7


@dataclass
class Batch:
    kind: Literal["prefill", "decode"]
    reqs: list[Req]
    #: prefill: uncached tokens computed per request (same order as reqs)
    extend_lens: list[int] = field(default_factory=list)
    #: prefill: cached tokens found per request
    prefix_lens: list[int] = field(default_factory=list)

    @property
    def uncached_tokens(self) -> int:
        return sum(self.extend_lens)

    @property
    def context_tokens(self) -> int:
        return sum(len(r.prompt_ids) + len(r.output_ids) for r in self.reqs)


class Scheduler:
    def __init__(self, config: SchedulerConfig, cache: RadixCache, clock: Callable[[], float]) -> None:
        self.config = config
        self.cache = cache
        self.clock = clock
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self._arrivals = 0
        self.in_flight: Batch | None = None
        # counters read by metrics
        self.retracted_total = 0
        self.last_prefill_hit_rate = 0.0

    # -- memory -----------------------------------------------------------------------------------

    @property
    def private_tokens(self) -> int:
        return sum(r.kv_private for r in self.running)

    @property
    def used_tokens(self) -> int:
        """KV tokens in use: everything in the tree plus tokens held outside it by running requests."""
        return self.cache.total_size + self.private_tokens

    @property
    def free_tokens(self) -> int:
        return self.config.max_total_tokens - self.used_tokens

    def _make_room(self, need: int) -> bool:
        """Evict until ``need`` tokens are free; False when even full eviction can't do it."""
        short = need - self.free_tokens
        if short > 0:
            self.cache.evict(short)
        return self.free_tokens >= need

    def _reserved_for_running(self) -> int:
        return int(sum(r.reserve() for r in self.running) * self.config.new_token_ratio)

    # -- requests in ------------------------------------------------------------------------------

    @property
    def _direction(self) -> int:
        """1: smaller priority values go first; -1: larger ones do (SGLang's default)."""
        return 1 if self.config.schedule_low_priority_values_first else -1

    def add(self, req: Req) -> Req | None:
        """Queue `req`. With a full queue, SGLang refuses the arrival (QueueFull) or, with priority
        scheduling, takes out the least important waiting request (lowest priority, the newest of
        equals) if the arrival is strictly more important: that request is returned, to be ended."""
        evicted = None
        if self.config.enable_priority_scheduling and req.priority is None:
            # A request without a priority is the least important of all (SGLang's default value).
            req.priority = sys.maxsize if self._direction == 1 else -sys.maxsize - 1
        limit = self.config.max_queued_requests
        if limit is not None and len(self.waiting) + 1 > limit:
            if not self.config.enable_priority_scheduling or not self.waiting:
                raise QueueFull("The request queue is full.")
            d = self._direction
            candidate = max(self.waiting, key=lambda r: (d * (r.priority or 0), r.arrival))
            if not d * (req.priority or 0) < d * (candidate.priority or 0):
                raise QueueFull("The request queue is full.")
            self.waiting.remove(candidate)
            candidate.finished_at = self.clock()
            evicted = candidate
        self._arrivals += 1
        req.arrival = self._arrivals
        self.waiting.append(req)
        return evicted

    def abort(self, rid: str | None = None, *, abort_all: bool = False) -> list[Req]:
        """Abort by rid prefix (or all). Returns queued requests that ended right now."""
        ended: list[Req] = []
        for req in list(self.waiting):
            if abort_all or (rid and req.rid.startswith(rid)):
                self.waiting.remove(req)
                req.finish = {"type": "abort", "message": "Abort in waiting queue"}
                req.finished_at = self.clock()
                ended.append(req)
        for req in self.running:
            if abort_all or (rid and req.rid.startswith(rid)):
                req.to_abort = True
        return ended

    def fail_waiting(self, req: Req, finish: dict) -> bool:
        """End a queued request with a server-side finish reason (e.g. an injected error)."""
        if req in self.waiting:
            self.waiting.remove(req)
            req.finish = finish
            req.finished_at = self.clock()
            return True
        return False

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running and self.in_flight is None

    # -- choosing work ----------------------------------------------------------------------------

    def next_batch(self) -> Batch | None:
        assert self.in_flight is None, "complete() the batch in flight first"  # nosec B101  # an invariant of the simulator's own bookkeeping, not a check on input
        batch = self._admit() or self._decode_batch()
        self.in_flight = batch
        return batch

    def _queue_order(self) -> list[Req]:
        # With priority scheduling, priority comes before every other key (SGLang sorts by it first).
        d = self._direction if self.config.enable_priority_scheduling else 0

        def rank(r: Req) -> int:
            return d * (r.priority or 0)

        if (
            self.config.schedule_policy == "lpm"
            and len(self.waiting) <= LPM_FALLBACK_QUEUE_LEN
            and not self.cache.disabled
        ):

            def match_len(r: Req) -> int:
                ids = r.fill_ids
                return self.cache.match_prefix(ids[: len(ids) - 1], r.namespace).length

            return sorted(self.waiting, key=lambda r: (rank(r), -match_len(r), r.arrival))
        return sorted(self.waiting, key=lambda r: (rank(r), r.arrival))

    def _admit(self) -> Batch | None:
        if not self.waiting or len(self.running) >= self.config.max_running_requests:
            return None
        batch = Batch("prefill", [])
        budget = self.config.max_prefill_tokens
        for req in self._queue_order():
            # Requests admitted into this batch are already in self.running (see below).
            if len(self.running) >= self.config.max_running_requests:
                break
            ids = req.fill_ids
            # At least one token is always recomputed, to produce the next token's logits.
            match = self.cache.match_prefix(ids[: len(ids) - 1], req.namespace)
            extend = len(ids) - match.length
            if batch.reqs and extend > budget:
                break
            self.cache.lock(match.node)
            headroom = self.free_tokens + self.cache.evictable_size - self._reserved_for_running()
            if extend + int(req.reserve() * self.config.new_token_ratio) > headroom or not self._make_room(extend):
                self.cache.unlock(match.node)
                break
            req.prefix_node = match.node
            req.kv_private = extend
            req.fill_len = len(ids)
            if req.cached_tokens is None:
                req.cached_tokens = match.length
            if req.forward_entry is None:
                req.forward_entry = self.clock()
            batch.reqs.append(req)
            batch.extend_lens.append(extend)
            batch.prefix_lens.append(match.length)
            budget -= extend
            # Joins the running set now so that memory accounting sees its tokens.
            self.running.append(req)
        if not batch.reqs:
            return None
        for req in batch.reqs:
            self.waiting.remove(req)
        total = sum(batch.extend_lens) + sum(batch.prefix_lens)
        self.last_prefill_hit_rate = sum(batch.prefix_lens) / total if total else 0.0
        return batch

    def _decode_batch(self) -> Batch | None:
        if not self.running:
            return None
        # One new KV slot per request: the token sampled last step is fed in now.
        while not self._make_room(len(self.running)):
            if len(self.running) == 1:
                raise RuntimeError("a single request does not fit in the KV pool (context length > pool?)")
            self._retract_one()
        for req in self.running:
            req.kv_private += 1
        return Batch("decode", list(self.running))

    def _retract_one(self) -> None:
        victim = min(self.running, key=lambda r: (len(r.output_ids), -len(r.prompt_ids)))
        self.running.remove(victim)
        if victim.prefix_node is not None:
            self.cache.unlock(victim.prefix_node)
        victim.prefix_node = None
        victim.kv_private = 0
        victim.retractions += 1
        self.retracted_total += 1
        self.waiting.append(victim)

    # -- applying a step ------------------------------------------------------------------------------

    def complete(self, batch: Batch) -> list[Req]:
        """Apply the step: one token per request, finish checks, cache updates. Returns requests
        whose state changed in a way a client should hear about (SGLang's ``stream_output``)."""
        assert batch is self.in_flight  # nosec B101  # an invariant of the simulator's own bookkeeping, not a check on input
        self.in_flight = None
        now = self.clock()
        changed: list[Req] = []
        for req in batch.reqs:
            if req.finished or req not in self.running:
                continue  # retracted meanwhile (cannot happen within one step, kept for safety)
            allow_eos = not req.params.ignore_eos and len(req.output_ids) >= req.params.min_new_tokens
            before = len(req.text)
            req.add_token(req.model.next_token(allow_eos=allow_eos))
            if req.first_token_at is None:
                req.first_token_at = now
            req.last_token_at = now
            self._check_finished(req, len(req.text) - before)
            if req.finished:
                req.finished_at = now
                self._release(req)
            elif batch.kind == "prefill":
                self._cache_unfinished(req)
            if self._should_output(req):
                changed.append(req)
        return changed

    def _check_finished(self, req: Req, new_chars: int) -> None:
        p = req.params
        token = req.output_ids[-1]
        if req.to_abort:
            req.finish = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
        elif len(req.output_ids) >= p.max_new_tokens:
            req.finish = {"type": "length", "length": p.max_new_tokens}
        elif len(req.output_ids) < p.min_new_tokens:
            return
        elif token in p.stop_token_ids or (not p.ignore_eos and token in tok.EOS_TOKEN_IDS):
            req.finish = {"type": "stop", "matched": token}
        else:
            matched = req.find_stop_string(new_chars)
            if matched is not None:
                req.finish = {"type": "stop", "matched": matched}

    def _should_output(self, req: Req) -> bool:
        if req.finished:
            return True
        if not req.stream:
            return False
        interval = req.params.stream_interval or 1
        n = len(req.output_ids)
        due = n % interval == 1 if interval > 1 else True
        return due and not req.tail_may_start_stop()

    def _cache_priority(self, req: Req) -> int:
        """The priority ``req`` inserts with: its own with priority scheduling (where a missing one was
        already given the least important value in ``add``), else 0: SGLang's eviction-policy docs say
        that without priority scheduling every node is priority 0."""
        if not self.config.enable_priority_scheduling:
            return 0
        return req.priority or 0

    def _cache_unfinished(self, req: Req) -> None:
        """After a prefill: put the computed tokens in the tree and lock the deeper path."""
        ids = (req.prompt_ids + req.output_ids)[: req.fill_len]
        self.cache.insert(ids, req.namespace, self._cache_priority(req))
        match = self.cache.match_prefix(ids, req.namespace)
        self.cache.lock(match.node)
        if req.prefix_node is not None:
            self.cache.unlock(req.prefix_node)
        req.prefix_node = match.node
        req.kv_private = len(ids) - match.length

    def _release(self, req: Req) -> None:
        """A request left the batch: cache what has KV (all but the last sampled token), free the rest."""
        ids = req.prompt_ids + req.output_ids[:-1]
        self.cache.insert(ids, req.namespace, self._cache_priority(req))
        if req.prefix_node is not None:
            self.cache.unlock(req.prefix_node)
        req.prefix_node = None
        req.kv_private = 0
        self.running.remove(req)

    # -- control ----------------------------------------------------------------------------------

    def flush_cache(self) -> bool:
        """Empty the cache if fully idle (SGLang refuses otherwise)."""
        if not self.idle:
            return False
        self.cache.reset()
        return True

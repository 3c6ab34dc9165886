"""The response cache: a request whose answer its input fully decides, asked again by the same person,
is answered from the first answer instead of the engine (issue 22).

**What may be cached.** Only a request the engine would answer the same way again: temperature 0 or a
fixed seed, one choice, plain sampling (no tools, which may act on the world, no response format,
logprobs or other engine fields), never a regeneration (which asks for another answer), never when
the caller opted out (`Cache-Control: no-store` on `/v1`: neither read nor kept; `no-cache`: not read,
kept) or the plan does (`Plan.response_cache`), and never while a model is being rolled out (two
versions serve it, and one must never answer with the other's words).

**The key** covers everything that decides the answer: the person (a cache is never shared between
people: nobody can be served, or probe, another's answers), the model and the version that serves it
(its rollout's node group), the whole prompt as assembled (system prompts, custom instructions,
retrieved passages, history, the question, the pictures), the raw prompt of a text completion, the
answer's token budget and the sampling parameters, and the cache's epoch, which moves when a model
route, the moderation policy or the staff's clear button changes what an answer may be (the product's
system prompt is in the prompt, so changing it changes every key).

**A hit** takes no admission place and no engine time: the driver replays the stored pieces through the
same destination, so the page gets the same frames and a program the same chunks. Only a completed,
unblocked answer is kept. It is billed by the plan's rule (`Plan.cached_answer_percent` of its tokens;
0: free), its ledger row marked `from_cache`.

**Where.** Redis in production (one key per answer with a time to live, and a sorted set that keeps
at most RESPONSE_CACHE_MAX_ENTRIES, the oldest dropped first); this process's memory in the embedded
default (the same bound). An answer longer than RESPONSE_CACHE_MAX_ANSWER_CHARS is not kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError

from chat.generation.turn import TurnContext
from chat.models import Message
from config import metrics
from config.redis import async_client, sync_client
from inference import fleet, rollout, routing

log = logging.getLogger(__name__)

#: Changes when what a kept answer holds changes: older entries are then never read.
SCHEMA = 1
PREFIX = "sglchat:answers:"
INDEX = "sglchat:answers-index"
EPOCH = "sglchat:answers-epoch"

#: What a program may send in Cache-Control to leave the cache out.
NO_STORE, NO_CACHE = "no-store", "no-cache"


@dataclass(frozen=True)
class Sampling:
    """What of an engine request, besides its prompt, decides its answer."""

    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    engine_fields: dict | None = None
    #: A text completion's raw prompt (its messages are then empty).
    prompt: str | None = None
    #: The caller's Cache-Control: "", NO_CACHE (do not read) or NO_STORE (do not read or keep).
    cache_control: str = ""
    #: A regeneration asks for another answer: never read.
    regenerate: bool = False
    #: The prompt ends with an answer cut at its length limit, to be written on: never read or kept
    #: (what comes back is the rest of one answer, not an answer to the messages).
    continuation: bool = False

    @property
    def deterministic(self) -> bool:
        return self.temperature == 0 or self.seed is not None


NO_SAMPLING = Sampling()


@dataclass(frozen=True)
class CachedAnswer:
    """A completed answer as it was written: its pieces (replayed one by one), its end and its counts."""

    pieces: list[str]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    model: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> CachedAnswer:
        return cls(**json.loads(raw))

    @classmethod
    def read(cls, raw: str | bytes | None) -> CachedAnswer | None:
        """What a cache read found: the answer, or None for nothing or for what another release kept."""
        if not raw:
            return None
        try:
            return cls.from_json(raw)
        except (TypeError, ValueError):
            return None

    @property
    def fits(self) -> bool:
        """Short enough to keep (RESPONSE_CACHE_MAX_ANSWER_CHARS), in either cache."""
        return sum(len(p) for p in self.pieces) <= settings.RESPONSE_CACHE_MAX_ANSWER_CHARS


@dataclass(frozen=True)
class SimilarSlot:
    """Where the semantic cache files a first question's answer once written (chat.generation.semantic_cache):
    its group, the question's entry there, and its vector (unit length, float32 bytes)."""

    group: str
    entry: str
    vector: bytes


@dataclass
class Lookup:
    """The cache's verdict for one request: its key (None: not cacheable) and the answer found, if any."""

    key: str | None = None
    #: Keep the answer once it is written (False with Cache-Control: no-store, or for a hit).
    keep: bool = False
    hit: CachedAnswer | None = None
    #: The version the key names (an answer is kept only if the node that wrote it serves that one).
    version: str = ""
    why_not: str = field(default="", compare=False)
    #: The cache's epoch when it could be read (None: not looked up, or Redis did not answer).
    epoch: str | None = None
    #: What answered it: "exact" (this request before) or "similar" (chat.generation.semantic_cache).
    hit_kind: str = ""
    #: Where the semantic cache files this first question's answer once written, if anywhere.
    slot: SimilarSlot | None = None


def version_of(model_id: str) -> str | None:
    """The version that serves the model: its one weighted node group (every node, without routes) and
    the weights its nodes said they run (SGLang's /model_info `weight_version`, learned when the poller
    meets a node and whenever it comes back); None during a rollout, or while its nodes disagree."""
    groups = rollout.group_weights(model_id)
    serving = sorted(group for group, weight in (groups or {}).items() if weight > 0)
    if groups and len(serving) != 1:
        return None
    group = serving[0] if groups else ""
    weights = {
        str(node.capabilities.get("weight_version", ""))
        for node in routing.serving_nodes(model_id)
        if not group or node.group == group
    }
    if len(weights) > 1:
        return None
    return f"{group or 'all-nodes'}@{weights.pop() if weights else ''}"


def served_version(model_id: str, node_name: str) -> str | None:
    """The version the node that wrote an answer serves, named as `version_of` names it."""
    node = next((n for n in fleet.snapshot() if n.name == node_name), None)
    if node is None:  # the Model Gateway chose (its nodes are its own): the model's version
        return version_of(model_id)
    grouped = bool(rollout.group_weights(model_id))
    return f"{node.group if grouped else 'all-nodes'}@{node.capabilities.get('weight_version', '')}"


def why_not_cacheable(turn: TurnContext, sampling: Sampling) -> str:
    """Why this request's answer may not be kept or served from the cache ("" when it may)."""
    if not settings.RESPONSE_CACHE_ENABLED:
        return "disabled"
    if sampling.cache_control == NO_STORE:
        return "no-store"
    if sampling.continuation:
        return "continuation"
    if not turn.plan.response_cache:
        return "plan"
    if turn.choices != 1 or sampling.engine_fields:
        return "fields"
    if version_of(turn.model.id) is None:
        return "rollout"
    if not sampling.deterministic:
        return "sampling"  # the semantic cache may still answer a web chat's (chat.generation.semantic_cache)
    return ""


def digest(turn: TurnContext, sampling: Sampling, *, epoch: str, version: str, **material) -> str:
    """A SHA-256 of what decides an answer besides its prompt (the model and its version, the answer's
    budget, the sampling parameters, the cache's epoch) and of `material`: a key of the response cache,
    or a group of the semantic cache's."""
    material.update(
        epoch=epoch,
        model=turn.model.id,
        version=version,
        max_tokens=turn.max_output_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        stop=sampling.stop,
        seed=sampling.seed,
    )
    encoded = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


def key_for(turn: TurnContext, messages: list[dict], sampling: Sampling, *, epoch: str, version: str) -> str:
    return digest(
        turn,
        sampling,
        epoch=epoch,
        version=version,
        schema=SCHEMA,
        tenant=turn.user.pk,
        messages=messages,
        prompt=sampling.prompt,
    )


def look_up(turn: TurnContext, messages: list[dict], sampling: Sampling) -> Lookup:
    """The cache's verdict for a request about to be admitted (read before any admission place)."""
    why = why_not_cacheable(turn, sampling)
    epoch = _epoch() if why in ("", "sampling") else None
    if epoch is None:
        # Not cacheable, or the epoch cannot be read (an answer kept now could outlive a clear).
        return Lookup(why_not=why or "unavailable")
    version = version_of(turn.model.id) or ""
    if why:
        return Lookup(version=version, why_not=why, epoch=epoch)
    key = key_for(turn, messages, sampling, epoch=epoch, version=version)
    hit = None
    if not (sampling.regenerate or sampling.cache_control == NO_CACHE):
        hit = _read(key)
    kind = Message.CacheHit.EXACT if hit else ""
    return Lookup(key=key, keep=hit is None, hit=hit, version=version, epoch=epoch, hit_kind=kind)


def counted(lookup: Lookup) -> None:
    """Count what the cache did for an admitted request (refused ones are not counted)."""
    metrics.RESPONSE_CACHE.labels(
        status(lookup.hit_kind if lookup.hit else "", kept=bool(lookup.key or lookup.slot))
    ).inc()


def status(hit_kind: str, *, kept: bool) -> str:
    """What the cache did, as the `x-cache` header says it: `hit` (this request's answer), `semantic-hit`
    (a similar first question's), `miss` (kept once written) or `bypass` (neither read nor kept)."""
    if hit_kind:
        return "semantic-hit" if hit_kind == Message.CacheHit.SIMILAR else "hit"
    return "miss" if kept else "bypass"


def keepable(finish_reason: str, served_version: str | None, lookup_version: str) -> bool:
    """An answer is kept only if the engine ended it itself (stop, or its length limit: an abort, from
    an operator or a draining node, is a cut answer) and the node that wrote it served the version its
    key names (a route changed in between would file one version's answer under the other)."""
    return finish_reason in ("stop", "length") and served_version == lookup_version


async def keep(key: str, answer: CachedAnswer) -> None:
    """Keep a completed answer under `key` (a failure to keep it only costs a later miss)."""
    raw = answer.to_json()
    if len(raw.encode()) > settings.RESPONSE_CACHE_MAX_ANSWER_CHARS * 4 + 1024 or not answer.fits:
        return
    client = async_client()
    if client is None:
        _local.put(key, raw)
        return
    now = time.time()
    try:
        async with client.pipeline(transaction=True) as pipe:
            pipe.set(PREFIX + key, raw, ex=settings.RESPONSE_CACHE_TTL_SECONDS)
            pipe.zadd(INDEX, {key: now})
            pipe.zremrangebyscore(INDEX, "-inf", now - settings.RESPONSE_CACHE_TTL_SECONDS)
            pipe.zcard(INDEX)
            counted = (await pipe.execute())[-1]
        excess = counted - settings.RESPONSE_CACHE_MAX_ENTRIES
        if excess > 0:
            oldest = await client.zpopmin(INDEX, excess)
            if oldest:
                await client.delete(*(PREFIX + member for member, _ in oldest))
    except RedisError:
        log.warning("could not keep an answer in the response cache", exc_info=True)
        return
    metrics.RESPONSE_CACHE.labels("kept").inc()


class NotCleared(Exception):
    """The cache could not be cleared (Redis did not answer)."""


def clear(reason: str) -> None:
    """Make every kept answer unreachable (the next epoch's keys differ), at once, in every process that
    shares the Redis (without Redis, in this process: the embedded default's one server). Raises
    NotCleared when Redis does not answer."""
    client = sync_client()
    if client is None:
        _local.clear()
    else:
        try:
            client.incr(EPOCH)
        except RedisError as exc:
            log.error("could not clear the response cache (%s)", reason, exc_info=True)
            raise NotCleared(str(exc)) from exc
    log.info("response cache cleared: %s", reason)


def clear_after_commit(reason: str) -> None:
    """`clear` once the change that makes the kept answers stale is committed (a request that read the
    new epoch with the old routes would otherwise keep an answer under the new epoch)."""

    def now() -> None:
        # Logged if it fails; answers kept meanwhile are kept only by the version their key names.
        with contextlib.suppress(NotCleared):
            clear(reason)

    transaction.on_commit(now)


def _epoch() -> str | None:
    client = sync_client()
    if client is None:
        return str(_local.epoch)
    try:
        return str(client.get(EPOCH) or "0")
    except RedisError:
        log.warning("could not read the response cache's epoch: answering afresh", exc_info=True)
        return None


def _read(key: str) -> CachedAnswer | None:
    client = sync_client()
    if client is None:
        raw = _local.get(key)
    else:
        try:
            raw = client.get(PREFIX + key)
        except RedisError:
            log.warning("could not read the response cache", exc_info=True)
            return None
    return CachedAnswer.read(raw)


class _LocalCache:
    """The embedded default's cache: this process's memory, least recently kept dropped first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self.epoch = 0

    def get(self, key: str) -> str | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None or found[0] < time.time():
                self._entries.pop(key, None)
                return None
            return found[1]

    def put(self, key: str, raw: str) -> None:
        with self._lock:
            self._entries[key] = (time.time() + settings.RESPONSE_CACHE_TTL_SECONDS, raw)
            self._entries.move_to_end(key)
            while len(self._entries) > settings.RESPONSE_CACHE_MAX_ENTRIES:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.epoch += 1


_local = _LocalCache()

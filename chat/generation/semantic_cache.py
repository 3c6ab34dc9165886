"""The semantic response cache: a first question very like an earlier one is answered with that one's
answer, marked as such, with a button to answer afresh (issue 22, item 2). Off until staff turn it on
(the console's Semantic cache page: on or off, the similarity threshold, the scope).

**Which requests.** First turns only: every message before the question is a system (or developer)
message and the question is plain text, with no pictures, no files' passages, no history, and no
longer than SEMANTIC_CACHE_MAX_QUESTION_CHARS. Everything the exact cache requires of a request
(chat.generation.response_cache: the plan allows caching, no tools or other engine fields, one choice,
no `Cache-Control: no-store`, no rollout in progress, never a regeneration) holds here too, except a
fixed sampling on the web chat, where the answer says it came from the cache and "Answer afresh" is
one click; a program (`/v1`) must still ask for temperature 0 or a seed (it has no such button; it
sees `x-cache: semantic-hit`).

**Which earlier questions.** Those asked in the same group: the same scope (the person; or, when staff
choose the public scope, everyone, for requests whose only instruction is the product's own prompt:
a person's custom instructions or a chat's system prompt keep them in their own scope), the same model
and version, the same system messages, the same numbers in the question ("2 + 2" never meets "2 + 3",
however alike their vectors), the same answer budget and sampling parameters, and the same epoch as
the exact cache (a clear, a route or a moderation change make every earlier question unreachable).
Among them, the nearest by cosine similarity of the embeddings (RETRIEVAL_EMBEDDING_MODEL, the fleet's
embedding model, one call per looked-up question; the product pays it, nobody is billed), if it is at
least the staff's threshold.

**What it cannot know.** Meaning is the embedding model's: two questions that differ in one word that
matters ("cheapest" and "most expensive", "with" and "without") may be closer than the threshold.
Keep the threshold high, watch the wrong-hit reports (thumbs-down on answers from the cache, on the
console's page), and prefer the person scope.

**Where.** Redis in production: per group, a hash of the questions' vectors, a hash of their answers
and a sorted set of when each was kept (at most SEMANTIC_CACHE_MAX_PER_SCOPE, the oldest dropped),
all three expiring after RESPONSE_CACHE_TTL_SECONDS; this process's memory in the embedded default.
Comparing is a scan of the group's vectors here (no vector index: a group is one person's first
questions, or the public FAQ's few hundred).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
import re
import threading
import time
import unicodedata
from array import array
from collections import OrderedDict
from dataclasses import dataclass, replace

from django.conf import settings
from django.core.cache import cache
from redis.exceptions import RedisError

from chat.generation.assemble import Prompt
from chat.generation.response_cache import NO_CACHE, CachedAnswer, Lookup, Sampling, SimilarSlot, digest
from chat.generation.turn import TurnContext
from chat.models import Message, SemanticCachePolicy
from config import metrics
from config.redis import async_client, sync_client
from config.refusals import Refusal
from documents.embedding import embed_texts
from inference.errors import EngineError

log = logging.getLogger(__name__)

SCHEMA = 1
PREFIX = "sglchat:similar:"
POLICY_KEY = "semantic-cache-policy"
#: How long the policy read from the database stays in the shared cache (saving it drops it at once).
POLICY_SECONDS = 300
#: The embedded default keeps at most this many groups (people, models, epochs) in memory.
MAX_LOCAL_GROUPS = 10_000
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")
_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True)
class Policy:
    enabled: bool = False
    threshold: float = 0.95
    scope: str = SemanticCachePolicy.Scope.PERSON


def policy() -> Policy:
    """Staff's settings, from the shared cache (one Redis read) or the database (the default when none is
    saved). A change is seen by every process at once: saving it drops the cached copy (forget_policy)."""
    found = cache.get(POLICY_KEY)
    if isinstance(found, Policy):
        return found
    row = SemanticCachePolicy.objects.order_by("pk").first()
    read = Policy() if row is None else Policy(enabled=row.enabled, threshold=row.threshold, scope=row.scope)
    cache.set(POLICY_KEY, read, POLICY_SECONDS)
    return read


def forget_policy() -> None:
    """Read the policy from the database again on next use, in every process."""
    cache.delete(POLICY_KEY)


def first_question(messages: list[dict]) -> tuple[list[str], str] | None:
    """(the system messages, the question) of a first turn, else None."""
    if not messages or messages[-1].get("role") != "user" or set(messages[-1]) - {"role", "content", "name"}:
        return None
    question = messages[-1].get("content")
    frame = []
    for message in messages[:-1]:
        content = message.get("content")
        if message.get("role") not in ("system", "developer") or not isinstance(content, str):
            return None
        frame.append(content)
    if not isinstance(question, str) or not question.strip():
        return None
    return frame, question


def numbers_in(question: str) -> list[str]:
    return sorted(_NUMBER_RE.findall(unicodedata.normalize("NFKC", question)))


def _scope(turn: TurnContext, frame: list[str], chosen: str) -> str:
    product_only = frame == ([settings.CHAT_DEFAULT_SYSTEM_PROMPT] if settings.CHAT_DEFAULT_SYSTEM_PROMPT else [])
    if chosen == SemanticCachePolicy.Scope.PUBLIC and product_only:
        return "public"
    return f"person:{turn.user.pk}"


def group_of(
    turn: TurnContext, frame: list[str], question: str, sampling: Sampling, *, scope: str, cache: Lookup
) -> str:
    return digest(
        turn,
        sampling,
        epoch=cache.epoch or "",
        version=cache.version,
        semantic_schema=SCHEMA,
        scope=scope,
        frame=frame,
        numbers=numbers_in(question),
    )


def _entry_of(question: str) -> str:
    """The same question, however spaced or cased, is one entry (asked again, it replaces the first)."""
    normal = _SPACE_RE.sub(" ", unicodedata.normalize("NFKC", question).casefold()).strip()
    return hashlib.sha256(normal.encode()).hexdigest()[:32]


def _packed(vector: list[float]) -> bytes:
    """The vector at unit length, as float32 bytes (what is kept and compared)."""
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return array("f", (x / norm for x in vector)).tobytes()


def similarity(a: bytes, b: bytes) -> float:
    """Cosine similarity of two packed vectors (both at unit length: their dot product)."""
    if len(a) != len(b):
        return -1.0  # another embedding model's: never alike
    return math.fsum(x * y for x, y in zip(array("f", a), array("f", b), strict=True))


def eligible(turn: TurnContext, prompt: Prompt, sampling: Sampling, cache: Lookup) -> tuple[list[str], str] | None:
    """The first turn's (frame, question) when the semantic cache may answer this request, else None."""
    if cache.epoch is None or cache.hit is not None or sampling.regenerate or prompt.about_files:
        return None
    if cache.why_not not in ("", "sampling"):
        return None  # disabled, opted out (plan or Cache-Control), engine fields, a rollout
    if cache.why_not == "sampling" and turn.api_key_id is not None:
        return None  # a program asked for a sample: it gets one (it has no "Answer afresh")
    asked = first_question(prompt.messages)
    if asked is None or len(asked[1]) > settings.SEMANTIC_CACHE_MAX_QUESTION_CHARS:
        return None
    return asked


def look_up(turn: TurnContext, prompt: Prompt, sampling: Sampling, cache: Lookup) -> Lookup:
    """`cache` (the exact cache's verdict), with the answer to a similar earlier question when there is
    one, and where to file this question's answer when there is not."""
    asked = eligible(turn, prompt, sampling, cache)
    if asked is None:
        return cache
    chosen = policy()
    if not chosen.enabled:
        return cache
    frame, question = asked
    group = group_of(turn, frame, question, sampling, scope=_scope(turn, frame, chosen.scope), cache=cache)
    try:
        vector = _packed(embed_texts([question]).vectors[0])
    except (Refusal, EngineError) as exc:
        # No embedding model, or none can answer now: the question is answered afresh, not refused.
        log.info("semantic cache skipped: the question could not be embedded (%s)", exc)
        metrics.SEMANTIC_CACHE.labels("unavailable").inc()
        return cache
    # `Cache-Control: no-cache`: answered afresh, and filed (no-store never reaches here).
    found = None if sampling.cache_control == NO_CACHE else _nearest(group, vector, chosen.threshold)
    if found is None:
        metrics.SEMANTIC_CACHE.labels("miss").inc()
        return replace(cache, slot=SimilarSlot(group=group, entry=_entry_of(question), vector=vector))
    metrics.SEMANTIC_CACHE.labels("hit").inc()
    return replace(cache, hit=found, hit_kind=Message.CacheHit.SIMILAR, keep=False)


def _nearest(group: str, vector: bytes, threshold: float) -> CachedAnswer | None:
    """The answer to the group's question nearest `vector`, if it is at least `threshold` alike."""
    client = sync_client()
    if client is None:
        best = _local.nearest(group, vector, threshold)
        raw = best
    else:
        try:
            vectors = client.hgetall(PREFIX + group + ":q")
            best_entry, best_score = None, threshold
            for entry, packed in vectors.items():
                score = similarity(base64.b64decode(packed), vector)
                if score >= best_score:
                    best_entry, best_score = entry, score
            raw = client.hget(PREFIX + group + ":a", best_entry) if best_entry is not None else None
        except RedisError:
            log.warning("could not read the semantic cache", exc_info=True)
            return None
    if not raw:
        return None
    try:
        return CachedAnswer.from_json(raw)
    except (TypeError, ValueError):
        return None


async def keep(slot: SimilarSlot, answer: CachedAnswer) -> None:
    """File a first question's completed answer among similar questions (a failure costs a later miss)."""
    raw = answer.to_json()
    if sum(len(p) for p in answer.pieces) > settings.RESPONSE_CACHE_MAX_ANSWER_CHARS:
        return
    client = async_client()
    if client is None:
        _local.put(slot, raw)
        metrics.SEMANTIC_CACHE.labels("kept").inc()
        return
    base = PREFIX + slot.group
    ttl = settings.RESPONSE_CACHE_TTL_SECONDS
    now = time.time()
    try:
        async with client.pipeline(transaction=True) as pipe:
            pipe.hset(base + ":q", slot.entry, base64.b64encode(slot.vector).decode())
            pipe.hset(base + ":a", slot.entry, raw)
            pipe.zadd(base + ":t", {slot.entry: now})
            pipe.zcard(base + ":t")
            for suffix in (":q", ":a", ":t"):
                pipe.expire(base + suffix, ttl)
            counted = (await pipe.execute())[3]
        excess = counted - settings.SEMANTIC_CACHE_MAX_PER_SCOPE
        if excess > 0:
            oldest = [member for member, _ in await client.zpopmin(base + ":t", excess)]
            if oldest:
                await client.hdel(base + ":q", *oldest)
                await client.hdel(base + ":a", *oldest)
    except RedisError:
        log.warning("could not keep an answer in the semantic cache", exc_info=True)
        return
    metrics.SEMANTIC_CACHE.labels("kept").inc()


class _LocalGroups:
    """The embedded default's semantic cache: this process's memory, each group bounded alike."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, OrderedDict[str, tuple[float, bytes, str]]] = {}

    def nearest(self, group: str, vector: bytes, threshold: float) -> str | None:
        now = time.time()
        with self._lock:
            entries = self._groups.get(group)
            if not entries:
                return None
            best, best_score = None, threshold
            for entry, (expires, packed, raw) in list(entries.items()):
                if expires < now:
                    del entries[entry]
                    continue
                score = similarity(packed, vector)
                if score >= best_score:
                    best, best_score = raw, score
            return best

    def put(self, slot: SimilarSlot, raw: str) -> None:
        with self._lock:
            entries = self._groups.setdefault(slot.group, OrderedDict())
            entries[slot.entry] = (time.time() + settings.RESPONSE_CACHE_TTL_SECONDS, slot.vector, raw)
            entries.move_to_end(slot.entry)
            while len(entries) > settings.SEMANTIC_CACHE_MAX_PER_SCOPE:
                entries.popitem(last=False)
            while len(self._groups) > MAX_LOCAL_GROUPS:  # the oldest group first (a past epoch's, often)
                del self._groups[next(iter(self._groups))]

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()


_local = _LocalGroups()

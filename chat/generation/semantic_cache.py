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

A web chat turn under a person's own instructions (custom instructions, a chat's system prompt) is not
looked up; a program's system messages are part of its group. A program's raw-prompt completion is not.

**Which earlier questions.** Those asked in the same group: the same scope (the person; or, when staff
choose the public scope, everyone's web chat questions, none with an e-mail address or a link in it),
the same model and version, the same system messages, the same specifics in the question (numbers and
operations in order, and the word each preposition governs: "2 + 2" never meets "2 + 3", nor "10 divided
by 2" "2 divided by 10", nor "Celsius to Fahrenheit" "Fahrenheit to Celsius", however alike their
vectors), the same answer budget and sampling parameters, and the same epoch as the exact cache (a
clear, a route or a moderation change make every earlier question unreachable).
Among them, the nearest by cosine similarity of the embeddings (RETRIEVAL_EMBEDDING_MODEL, the fleet's
embedding model, one call per looked-up question; the product pays it, nobody is billed), if it is at
least the staff's threshold.

**What it cannot know.** Meaning is the embedding model's: two questions that differ in one word that
matters ("cheapest" and "most expensive", "with" and "without") may be closer than the threshold.
Keep the threshold high, watch the wrong-hit reports (thumbs-down on answers from the cache, on the
console's page), and prefer the person scope.

**Where.** Redis in production: per group, a hash of the questions' vectors, a hash of their answers
and a sorted set of when each was kept (at most SEMANTIC_CACHE_MAX_PER_SCOPE, the oldest dropped; each
entry read only for RESPONSE_CACHE_TTL_SECONDS after it was kept), and a sorted set of the groups (at
most SEMANTIC_CACHE_MAX_GROUPS, the least recently kept dropped whole); this process's memory in the
embedded default, bounded alike.
Comparing is a scan of the group's vectors here (no vector index: a group is one person's first
questions, or the public FAQ's few hundred).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import math
import operator
import re
import threading
import time
import unicodedata
from array import array
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from django.conf import settings
from django.core.cache import cache
from redis.exceptions import RedisError

from chat.generation.assemble import Prompt
from chat.generation.response_cache import (
    NO_CACHE,
    CachedAnswer,
    Lookup,
    Sampling,
    SimilarSlot,
    digest,
    why_not_cacheable,
)
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
#: How long the policy read from the database stays in the shared cache. Saving it drops the copy once
#: committed; a request that read the old row just before may put it back, for at most this long.
POLICY_SECONDS = 30
GROUPS = "sglchat:similar-groups"
_SPECIFIC_RE = re.compile(
    r"-?\d+(?:[.,:/]\d+)*|[-+*/\u00d7\u00f7^%=<>\u221a]"
    r"|\b(?:plus|minus|times|divided|over|multiplied|squared|cubed|percent|power|root|not|without|except|never)\b"
)
#: A preposition and the word it governs (past an article or a possessive): "to fahrenheit", "of austria".
_GOVERNED_RE = re.compile(
    r"\b(of|in|on|for|to|into|from|than|before|after|with|without|versus|vs)\s+"
    r"(?:(?:the|a|an|my|your|our|their|his|her|its|this|that|these|those)\s+)?(\w+)"
)
_SAME_PREPOSITION = {"into": "to", "versus": "vs"}
#: An e-mail address or a link: a question with one is never shared in the public scope.
_PERSONAL_RE = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|https?://|www\.", re.IGNORECASE)
#: Float32 rounding: a vector compared with itself may come out a hair under 1.
_EPSILON = 1e-5
_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True)
class Policy:
    enabled: bool = False
    threshold: float = 0.95
    scope: str = SemanticCachePolicy.Scope.PERSON


def policy() -> Policy:
    """Staff's settings, from the shared cache (one Redis read) or the database (the default when none is
    saved). Saving it drops the cached copy once committed (forget_policy), so every process reads the
    change on its next question, or within POLICY_SECONDS if one put the old copy back meanwhile."""
    with contextlib.suppress(RedisError):  # Redis away: the database says
        found = cache.get(POLICY_KEY)
        if isinstance(found, Policy):
            return found
    row = SemanticCachePolicy.objects.order_by("pk").first()
    read = Policy() if row is None else Policy(enabled=row.enabled, threshold=row.threshold, scope=row.scope)
    with contextlib.suppress(RedisError):
        cache.set(POLICY_KEY, read, POLICY_SECONDS)
    return read


def forget_policy() -> None:
    """Read the policy from the database again on next use, in every process."""
    with contextlib.suppress(RedisError):  # then each copy lapses within POLICY_SECONDS
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


def specifics(question: str) -> list[str]:
    """What two questions must share to be compared at all: in order, their numbers (with a sign before
    them), the arithmetic between them and the words that name an operation or a negation; and, in any
    order, the word each preposition of direction or belonging governs. "10 divided by 2" and "2 divided
    by 10", "12 times 7" and "12 plus 7", "Celsius to Fahrenheit" and "Fahrenheit to Celsius", "the capital
    of Australia" and "the capital of Austria" are never alike, whatever the vectors say (an embedding
    puts such pairs close: they share nearly every word)."""
    text = unicodedata.normalize("NFKC", question).casefold()
    governed = sorted({f"{_SAME_PREPOSITION.get(p, p)}>{w}" for p, w in _GOVERNED_RE.findall(text)})
    return [*_SPECIFIC_RE.findall(text), *governed]


def _product_only(frame: list[str]) -> bool:
    """The only instruction is the product's own prompt (no custom instructions, no chat system prompt)."""
    return frame == ([settings.CHAT_DEFAULT_SYSTEM_PROMPT] if settings.CHAT_DEFAULT_SYSTEM_PROMPT else [])


def _scope(turn: TurnContext, question: str, chosen: str) -> str:
    """The public FAQ holds the web chat's questions only (a program could otherwise probe what others
    asked, or plant answers), and none that carries an address or a link (someone's own details)."""
    public = chosen == SemanticCachePolicy.Scope.PUBLIC and turn.api_key_id is None
    if public and not _PERSONAL_RE.search(question):
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
        specifics=specifics(question),
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
    return sum(map(operator.mul, array("f", a), array("f", b)))


def eligible(turn: TurnContext, prompt: Prompt, sampling: Sampling, cache: Lookup) -> tuple[list[str], str] | None:
    """The first turn's (frame, question) when the semantic cache may answer this request, else None."""
    if cache.epoch is None or cache.hit is not None or sampling.regenerate or prompt.about_files:
        return None
    if cache.why_not not in ("", "sampling"):
        return None  # disabled, opted out (plan or Cache-Control), engine fields, a rollout
    if turn.api_key_id is not None and (cache.why_not == "sampling" or sampling.prompt is not None):
        return None  # a program asked for a sample (it has no "Answer afresh"), or continues a raw prompt
    asked = first_question(prompt.messages)
    if asked is None or len(asked[1]) > settings.SEMANTIC_CACHE_MAX_QUESTION_CHARS:
        return None
    if turn.api_key_id is None and not _product_only(asked[0]):
        return None  # the person's own instructions (custom instructions, a chat's system prompt)
    return asked


def a_cache_may_answer(turn: TurnContext, sampling: Sampling, *, first_question: bool) -> bool:
    """Whether the exact cache or this one might answer the request, as far as is known before its
    prompt is built (`first_question`: the chat has no earlier turn): such a request needs no admission
    place, so a full count does not refuse it early."""
    if sampling.regenerate or sampling.continuation or sampling.cache_control == NO_CACHE:
        return False  # answered afresh whatever either cache has
    why = why_not_cacheable(turn, sampling)
    if why == "":
        return True
    return why == "sampling" and turn.api_key_id is None and first_question and policy().enabled


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
    group = group_of(turn, frame, question, sampling, scope=_scope(turn, question, chosen.scope), cache=cache)
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
        return replace(cache, slot=SimilarSlot(group=group, entry=_entry_of(question), vector=vector))
    return replace(cache, hit=found, hit_kind=Message.CacheHit.SIMILAR, keep=False)


def counted(lookup: Lookup) -> None:
    """Count what the semantic cache did for an admitted request (refused ones are not counted)."""
    if lookup.hit_kind == Message.CacheHit.SIMILAR:
        metrics.SEMANTIC_CACHE.labels("hit").inc()
    elif lookup.slot is not None:
        metrics.SEMANTIC_CACHE.labels("miss").inc()


def _nearest(group: str, vector: bytes, threshold: float) -> CachedAnswer | None:
    """The answer to the group's question nearest `vector`, if it is at least `threshold` alike."""
    client = sync_client()
    if client is None:
        return CachedAnswer.read(_local.nearest(group, vector, threshold))
    base = PREFIX + group
    try:
        with client.pipeline(transaction=False) as pipe:
            pipe.hgetall(base + ":q")
            pipe.zrangebyscore(base + ":t", time.time() - settings.RESPONSE_CACHE_TTL_SECONDS, "+inf")
            vectors, live = pipe.execute()
        entry = _best(((e, base64.b64decode(vectors[e])) for e in set(live) & set(vectors)), vector, threshold)
        return CachedAnswer.read(client.hget(base + ":a", entry) if entry is not None else None)
    except RedisError:
        log.warning("could not read the semantic cache", exc_info=True)
        return None


def _best(candidates: Iterable[tuple[str, bytes]], vector: bytes, threshold: float) -> str | None:
    """Of (key, packed vector) pairs, the key of the one nearest `vector`, if at least `threshold` alike."""
    best, best_score = None, threshold - _EPSILON
    for key, packed in candidates:
        score = similarity(packed, vector)
        if score >= best_score:
            best, best_score = key, score
    return best


async def keep(slot: SimilarSlot, answer: CachedAnswer) -> None:
    """File a first question's completed answer among similar questions (a failure costs a later miss)."""
    if not answer.fits:
        return
    raw = answer.to_json()
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
            pipe.zrangebyscore(base + ":t", "-inf", now - ttl)  # lapsed: dropped below
            pipe.zcard(base + ":t")
            for suffix in (":q", ":a", ":t"):
                pipe.expire(base + suffix, ttl)
            pipe.zadd(GROUPS, {slot.group: now})
            pipe.zcard(GROUPS)
            results = await pipe.execute()
        lapsed, counted, groups = results[3], results[4], results[-1]
        excess = counted - len(lapsed) - settings.SEMANTIC_CACHE_MAX_PER_SCOPE
        dropped = list(lapsed)
        if excess > 0:
            dropped += [member for member, _ in await client.zpopmin(base + ":t", excess + len(lapsed))]
        if dropped:
            await client.zrem(base + ":t", *dropped)
            await client.hdel(base + ":q", *dropped)
            await client.hdel(base + ":a", *dropped)
        if groups > settings.SEMANTIC_CACHE_MAX_GROUPS:
            gone = [g for g, _ in await client.zpopmin(GROUPS, groups - settings.SEMANTIC_CACHE_MAX_GROUPS)]
            await client.delete(*(PREFIX + g + suffix for g in gone for suffix in (":q", ":a", ":t")))
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
        """The answer (as kept) to the group's question nearest `vector`; lapsed entries are dropped."""
        now = time.time()
        with self._lock:
            entries = self._groups.get(group) or OrderedDict()
            for entry in [e for e, (expires, _, _) in entries.items() if expires < now]:
                del entries[entry]
            best = _best(((e, packed) for e, (_, packed, _) in entries.items()), vector, threshold)
            return entries[best][2] if best is not None else None

    def put(self, slot: SimilarSlot, raw: str) -> None:
        with self._lock:
            entries = self._groups.pop(slot.group, None) or OrderedDict()
            self._groups[slot.group] = entries  # the most recently kept group last
            entries[slot.entry] = (time.time() + settings.RESPONSE_CACHE_TTL_SECONDS, slot.vector, raw)
            entries.move_to_end(slot.entry)
            while len(entries) > settings.SEMANTIC_CACHE_MAX_PER_SCOPE:
                entries.popitem(last=False)
            while len(self._groups) > settings.SEMANTIC_CACHE_MAX_GROUPS:  # the least recently kept first
                del self._groups[next(iter(self._groups))]

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()


_local = _LocalGroups()

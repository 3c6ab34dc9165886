"""Settle: how a generation ended, what it costs, and the writes that close it.

One rule for every ending, on every transport (`billed_usage`): nothing generated, nothing billed
(the quota hold is given back); what was generated is billed by the engine's own counts when it gave
them (every ending it saw through: completed, stopped, blocked, cut by length); when it never could
(the stream broke, or the runner died), by the prompt the engine said it processed plus the engine
tokenizer's count of the text that was saved. `bill` applies the result to the reservation: the one
ledger row, or the release.

A saved chat answer is closed by `complete` (the runner's, and the reaper's for an answer whose
runner died), so both write the same things in the same order and billing is settled exactly once:
the final write only changes a message that is still pending or streaming, and the ledger row is
written with it (one statement, billing.ledger), so whichever of the two gets there first settles and the other
changes nothing. A program's completion keeps no message: `bill` alone closes it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.db import DatabaseError
from django.utils import timezone
from redis.exceptions import RedisError

from billing import services as billing
from billing.selectors import BillingPeriod
from chat.generation import admission, engine
from chat.generation.engine import Job, Usage
from chat.generation.notify import announce_quietly
from chat.generation.response_cache import CachedAnswer
from chat.generation.streams import DELTA, DONE, FINISHED_TTL_SECONDS, StreamLost, get_streams
from chat.models import Message
from chat.serializers import message_json
from config import metrics
from config.tokens import estimate_tokens

log = logging.getLogger(__name__)

#: Tries of the final write when the database fails under it (a dropped connection, a full pool).
FINAL_WRITE_TRIES = 5

ENDED, GONE, ALREADY_ENDED = "ended", "gone", "already ended"
#: Seconds a blocked answer's token stream stays readable (long enough for readers already following it).
BLOCKED_STREAM_TTL_SECONDS = 5

COMPLETED, STOPPED, FAILED, BLOCKED, INTERRUPTED = (
    Message.Status.COMPLETED,
    Message.Status.STOPPED,
    Message.Status.FAILED,
    Message.Status.BLOCKED,
    Message.Status.INTERRUPTED,
)


@dataclass
class Ending:
    """How one generation ended, in the words every transport renders."""

    status: str
    #: The sentence a person reads (a failure, or why moderation cut the answer).
    error: str = ""
    #: What the engine wrote (a blocked answer's text is kept for staff only, never shown).
    text: str = ""
    #: What is billed; None: nothing (nothing was generated).
    usage: Usage | None = None
    ttft_ms: int | None = None
    #: The engine's finish reason ("stop", "length", "abort"...), when it gave one.
    finish_reason: str = ""
    #: What ended it, when something failed: the engine error or refusal (the API's status code).
    failure: Exception | None = None

    @property
    def shown_text(self) -> str:
        return "" if self.status == BLOCKED else self.text


def generated(text: str, reported: Usage | None) -> bool:
    return bool(text) or (reported is not None and reported.completion_tokens > 0)


async def billed_usage(
    job: Job | None, text: str, reported: Usage | None, *, final: bool, prompt_estimate: int
) -> Usage | None:
    """The usage to bill for a generation that wrote `text`, the engine having last reported
    `reported` (`final`: at the end, with its finish). `job` is the engine request (its node counts
    the text); None when the node is gone (the count is then the engine's last one, or an estimate)."""
    if not generated(text, reported):
        return None
    if job is not None and job.cached is not None:
        return _replayed_usage(job.cached, text, job.cache_hit)
    if final and reported is not None:
        return reported
    counted = await engine.count_tokens(job, text) if job is not None else None
    if counted is None:
        counted = reported.completion_tokens if reported is not None and reported.completion_tokens else None
    if counted is None:
        counted = estimate_tokens(text)
        log.warning("billing an estimate of %d tokens: no engine could count the saved text", counted)
    if reported is None:
        log.warning("billing the prompt's estimate (%d tokens): the engine never reported it", prompt_estimate)
        return Usage(prompt_tokens=prompt_estimate, cached_tokens=0, completion_tokens=counted)
    return Usage(
        prompt_tokens=reported.prompt_tokens,
        cached_tokens=min(reported.cached_tokens, reported.prompt_tokens),
        completion_tokens=counted,
        image_tokens=reported.image_tokens,
        cache_hit=reported.cache_hit,
    )


def _replayed_usage(answer: CachedAnswer, text: str, kind: str = "") -> Usage:
    """An answer from the response cache, counted as the engine first counted it (no engine is asked):
    its completion in the share of it that was replayed (all of it, unless stopped)."""
    whole = sum(len(piece) for piece in answer.pieces)
    completion = answer.completion_tokens
    if whole and len(text) < whole:
        completion = math.ceil(completion * len(text) / whole)
    return Usage(
        prompt_tokens=answer.prompt_tokens,
        cached_tokens=min(answer.cached_tokens, answer.prompt_tokens),
        completion_tokens=completion,
        cache_hit=kind or Message.CacheHit.EXACT,
    )


def bill(
    reservation: billing.Reservation | None,
    usage: Usage | None,
    *,
    model: str,
    node: str,
    generation_id: str | int,
    conversation_id: int | None = None,
    api_key_id: int | None = None,
    user=None,
    period: BillingPeriod | None = None,
    auto_route: str = "",
    closing: billing.Closing | None = None,
    counters: list[billing.CounterUpdate] | None = None,
) -> bool:
    """Settle the reservation for `usage` (the one ledger row), or give it back when nothing is billed.
    `auto_route`: why Auto chose the model (chat.generation.auto_route), kept on the row. `closing`:
    the answer's final write, made with the ledger row (billing.ledger); returns False when it
    changed nothing (the answer was ended by someone else, or deleted), and then nothing is settled.
    `counters`: where the quota counter's update goes, to be sent with the place (`Holds`)."""
    if reservation is None:
        return True
    if usage is None:
        billing.release(reservation, counters=counters)
        return True
    record = billing.settle(
        reservation,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.cached_tokens,
        completion_tokens=usage.completion_tokens,
        from_cache=usage.from_cache,
        auto_route=auto_route,
        model=model,
        node=node,
        conversation_id=conversation_id,
        api_key_id=api_key_id,
        generation_id=generation_id,
        user=user,
        period=period,
        closing=closing,
        counters=counters,
    )
    return record is not None


def mark_streaming(message_id: int, node: str) -> None:
    Message.objects.filter(pk=message_id, status=Message.Status.PENDING).update(
        status=Message.Status.STREAMING, node=node
    )


def checkpoint(message_id: int, text: str, reported: Usage | None) -> None:
    """Keep the text so far on an unfinished answer, with the prompt the engine said it processed
    (the reaper's figures if this runner dies)."""
    fields: dict = {"content": text}
    if reported is not None:
        fields.update(
            prompt_tokens=reported.prompt_tokens, cached_tokens=min(reported.cached_tokens, reported.prompt_tokens)
        )
    Message.objects.filter(pk=message_id, status__in=Message.ACTIVE_STATUSES).update(**fields)


def save_final(
    message: Message,
    reservation: billing.Reservation | None,
    ending: Ending,
    *,
    user=None,
    node: str = "",
    period: BillingPeriod | None = None,
    counters: list[billing.CounterUpdate] | None = None,
) -> str:
    """Write the answer's final state and settle its usage, together (one statement on PostgreSQL).
    The quota counter's update is added to `counters` (sent with the admission place, `give_back`).

    `message` is the answer as it was when it started; its final fields are set on it. Returns
    ENDED, or GONE when it was deleted meanwhile (with its conversation: the reservation is given
    back), or ALREADY_ENDED when the runner or the reaper got there first (nothing is written).
    A message saved without a reservation (damaged data) is ended without a ledger row, loudly.
    """
    owner = user if user is not None else message.conversation.owner
    usage = ending.usage or Usage()
    final = {
        "content": ending.shown_text,  # cut by moderation: the user never gets it back (staff have it on the flag)
        "status": ending.status,
        "error": ending.error,
        "prompt_tokens": usage.prompt_tokens,
        "cached_tokens": min(usage.cached_tokens, usage.prompt_tokens),
        "completion_tokens": usage.completion_tokens,
        "finished": timezone.now(),
        "node": node or message.node,
        "cache_hit": usage.cache_hit,
        "finish_reason": ending.finish_reason[:16],
    }
    if ending.ttft_ms is not None:
        final["ttft_ms"] = ending.ttft_ms
    active = Message.objects.filter(pk=message.pk, status__in=Message.ACTIVE_STATUSES)
    if reservation is not None and ending.usage is not None:
        # The final write and the ledger row: one statement (billing.ledger), both or neither.
        ended = bill(
            reservation,
            ending.usage,
            model=message.model,
            node=final["node"],
            conversation_id=message.conversation_id,
            generation_id=message.pk,
            user=owner,
            period=period,
            auto_route=message.auto_route,
            closing=billing.Closing(active, final),
            counters=counters,
        )
    else:
        ended = bool(active.update(**final))
        if ended and reservation is None:
            log.error("message %s had no quota reservation: ended without a ledger row", message.pk)
        elif ended:
            bill(
                reservation, None, model=message.model, node=final["node"], generation_id=message.pk, counters=counters
            )
    if not ended:
        if Message.objects.filter(pk=message.pk).exists():
            return ALREADY_ENDED
        bill(reservation, None, model=message.model, node=final["node"], generation_id=message.pk, counters=counters)
        return GONE
    for name, value in final.items():
        setattr(message, name, value)
    return ENDED


async def write_retrying(what: str, func, *args, **kwargs):
    """Run `func` (database work) in a worker thread, trying again with backoff when the database
    fails under it (a dropped connection, a pool that cannot serve in time): what the engine produced
    is not lost to a passing failure. Raises the last error after FINAL_WRITE_TRIES tries."""
    for attempt in range(1, FINAL_WRITE_TRIES + 1):
        try:
            return await database_sync_to_async(func)(*args, **kwargs)
        except DatabaseError:
            if attempt == FINAL_WRITE_TRIES:
                log.error("%s failed %d times; giving up", what, attempt, exc_info=True)
                raise
            log.warning("%s failed (try %d); retrying", what, attempt, exc_info=True)
            await asyncio.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


async def complete(
    message: Message,
    reservation: billing.Reservation | None,
    ending: Ending,
    holds: Holds,
    *,
    owner_id: int,
    user=None,
    node: str = "",
    last_chunk: str = "",
    period: BillingPeriod | None = None,
    sent: list[tuple[str, str]] | None = None,
) -> bool:
    """Save and settle a chat answer, give back its `holds`, close the token stream (the last delta
    and a "done" frame, in one round trip) and announce the end. Returns whether this call ended it.

    `message` must carry what message_json reads without a query (its sibling_ids, its conversation
    id); `last_chunk` is the end of the text not yet sent to readers; `period` is the billing period the
    turn was admitted under (the reaper has none: it is looked up); `sent` is the runner's (frame id,
    text) of each delta it streamed, to rebuild the stream if Redis lost it meanwhile.
    """
    state = await write_retrying(
        f"final write of message {message.pk}",
        save_final,
        message,
        reservation,
        ending,
        user=user,
        node=node,
        period=period,
        counters=holds.counters,
    )
    # Before the readers hear of the end: the next question finds the quota settled and the place free.
    await give_back(holds)
    if state == ALREADY_ENDED:
        return False
    frames = [(DELTA, {"text": last_chunk})] if last_chunk else []
    if state == GONE:
        await _finish_stream(message.pk, frames, sent=sent)
        return False
    frames.append((DONE, {"message": message_json(message)}))
    # A blocked answer's stream is dropped soon, so a later reader is served the saved (empty) answer
    # rather than a replay of the cut text.
    ttl = BLOCKED_STREAM_TTL_SECONDS if message.status == BLOCKED else FINISHED_TTL_SECONDS
    await _finish_stream(message.pk, frames, ttl=ttl, sent=sent)
    await announce_quietly(owner_id, message.conversation_id, message.pk, active=False)
    return True


class CounterUpdates(list):
    """A generation's quota counter updates (`bill` adds each once its ledger row is committed): sent
    with the place by `give_back`, or, for one committed after that (the runner was cancelled while its
    final write went on in a worker thread), applied as it comes."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._taken = False

    def append(self, update: billing.CounterUpdate) -> None:
        with self._lock:
            if not self._taken:
                super().append(update)
                return
        billing.send_counter_updates([update])

    def take(self) -> list[billing.CounterUpdate]:
        """The updates so far, to be sent; any later one is applied as it comes."""
        with self._lock:
            self._taken = True
            return list(self)


@dataclass(eq=False)
class Holds:
    """What an admitted generation holds until its end is written: its admission place (the engine
    request id; empty for an answer saved without one) and, once it is billed, its quota counter's
    update (`bill`'s `counters`). Given back once, both in one Redis round trip (`give_back`)."""

    place: str
    counters: CounterUpdates = field(default_factory=CounterUpdates)
    given_back: bool = False


async def give_back(holds: Holds) -> None:
    """Give the place back with the quota counter's update, in one round trip; only the first call
    does (the destination's, as soon as its end is written, or else the driver's). If Redis cannot
    take them now, the place's lease lapses, the hold expires, and the nightly reconciliation mends
    the settled count from the ledger."""
    if holds.given_back:
        return
    holds.given_back = True
    counters = holds.counters.take()
    try:
        await admission.release(holds.place, along=lambda pipe: billing.send_counter_updates(counters, pipe))
    except RedisError:
        log.warning(
            "admission place of %s and its quota counter not given back now: the lease and the hold lapse instead",
            holds.place or "an answer",
        )


def record_metrics(transport: str, ending: Ending) -> None:
    usage = ending.usage or Usage()
    if usage.from_cache:
        # Replayed from the response cache: an answer, but no engine's time to first token or tokens.
        metrics.answer_ended(transport, ending.status, ttft_ms=None)
        return
    metrics.answer_ended(
        transport,
        ending.status,
        ttft_ms=ending.ttft_ms,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.cached_tokens,
        completion_tokens=usage.completion_tokens,
    )


async def _finish_stream(
    message_id: int, frames: list, *, ttl: int = FINISHED_TTL_SECONDS, sent: list[tuple[str, str]] | None = None
) -> None:
    """Close the token stream, trying again while Redis cannot take it (readers wait for its "done").
    With the runner's `sent` deltas, a stream Redis lost meanwhile is rebuilt first, so it never ends
    up holding only the answer's end."""
    streams = get_streams()
    for attempt in range(1, FINAL_WRITE_TRIES + 1):
        try:
            try:
                await streams.finish(message_id, frames, ttl=ttl, continuing=bool(sent))
            except StreamLost:
                log.warning("token stream of message %s lost (Redis lost its data); rebuilding it", message_id)
                await streams.restore(message_id, sent or [])
                await streams.finish(message_id, frames, ttl=ttl)
            return
        except RedisError:
            if attempt == FINAL_WRITE_TRIES:
                log.error(
                    "stream of message %s could not be closed; its readers see it end when it expires",
                    message_id,
                    exc_info=True,
                )
                return
            log.warning("closing the stream of message %s failed (try %d); retrying", message_id, attempt)
            await asyncio.sleep(0.2 * 2**attempt)

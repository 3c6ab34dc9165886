"""Settle: the end of a generation. Final state, usage in the ledger, the stream closed, every tab told.

Shared by the runner (an answer that ended) and the reaper (an answer whose runner died), so both
write the same things in the same order and billing is settled exactly once: the final write only
changes a message that is still pending or streaming, and the ledger row is written in the same
transaction, so whichever of the two gets there first settles and the other changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.db import DatabaseError, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from billing import services as billing
from billing.selectors import BillingPeriod
from chat.generation import admission
from chat.generation.engine import Usage
from chat.generation.notify import announce_quietly
from chat.generation.streams import DELTA, DONE, FINISHED_TTL_SECONDS, StreamLost, get_streams
from chat.models import Message
from chat.serializers import message_json
from chat.tokens import estimate_tokens
from config import metrics

log = logging.getLogger(__name__)

#: Tries of the final write when the database fails under it (a dropped connection, a full pool).
FINAL_WRITE_TRIES = 5

ENDED, GONE, ALREADY_ENDED = "ended", "gone", "already ended"
#: Seconds a blocked answer's token stream stays readable (long enough for readers already following it).
BLOCKED_STREAM_TTL_SECONDS = 5


@dataclass
class Outcome:
    status: str = ""
    error: str = ""
    ttft_ms: int | None = None
    usage: Usage | None = None
    finish_reason: str = ""
    #: The prompt size as estimated when the request was made (used when the engine never said).
    prompt_estimate: int = 0


def mark_streaming(message_id: int, node: str) -> None:
    Message.objects.filter(pk=message_id, status=Message.Status.PENDING).update(
        status=Message.Status.STREAMING, node=node
    )


def checkpoint(message_id: int, text: str) -> None:
    """Keep the text so far on an unfinished answer (the reaper's fallback if the stream is gone)."""
    Message.objects.filter(pk=message_id, status__in=Message.ACTIVE_STATUSES).update(content=text)


def save_final(
    message: Message,
    reservation: billing.Reservation | None,
    text: str,
    outcome: Outcome,
    *,
    user=None,
    node: str = "",
    period: BillingPeriod | None = None,
) -> str:
    """Write the answer's final state and settle its usage, in one transaction.

    `message` is the answer as it was when it started; its final fields are set on it. Returns
    ENDED, or GONE when it was deleted meanwhile (with its conversation: the reservation is given
    back), or ALREADY_ENDED when the runner or the reaper got there first (nothing is written).
    A message saved without a reservation (damaged data) is ended without a ledger row, loudly.
    """
    owner = user if user is not None else message.conversation.owner
    status = outcome.status
    usage = outcome.usage or Usage(prompt_tokens=outcome.prompt_estimate, completion_tokens=estimate_tokens(text))
    if status == Message.Status.BLOCKED:
        text = ""  # cut by moderation: the user never gets it back (staff have it on the flag); it is billed
    final = {
        "content": text,
        "status": status,
        "error": outcome.error,
        "prompt_tokens": usage.prompt_tokens,
        "cached_tokens": min(usage.cached_tokens, usage.prompt_tokens),
        "completion_tokens": usage.completion_tokens,
        "finished": timezone.now(),
        "node": node or message.node,
    }
    if outcome.ttft_ms is not None:
        final["ttft_ms"] = outcome.ttft_ms
    with transaction.atomic():
        if not Message.objects.filter(pk=message.pk, status__in=Message.ACTIVE_STATUSES).update(**final):
            if Message.objects.filter(pk=message.pk).exists():
                return ALREADY_ENDED
            if reservation is not None:
                billing.release(reservation)
            return GONE
        if reservation is None:
            log.error("message %s had no quota reservation: ended without a ledger row", message.pk)
        else:
            billing.settle(
                reservation,
                prompt_tokens=usage.prompt_tokens,
                cached_tokens=usage.cached_tokens,
                completion_tokens=usage.completion_tokens,
                model=message.model,
                node=final["node"],
                conversation_id=message.conversation_id,
                generation_id=message.pk,
                user=owner,
                period=period,
            )
    for field, value in final.items():
        setattr(message, field, value)
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
    text: str,
    outcome: Outcome,
    *,
    owner_id: int,
    user=None,
    node: str = "",
    last_chunk: str = "",
    period: BillingPeriod | None = None,
    sent: list[tuple[str, str]] | None = None,
) -> bool:
    """Save and settle, give back the admission place, close the token stream (the last delta and a
    "done" frame, in one round trip) and announce the end. Returns whether this call ended it.

    `message` must carry what message_json reads without a query (its sibling_ids, its conversation
    id); `last_chunk` is the end of `text` not yet sent to readers; `period` is the billing period the
    turn was admitted under (the reaper has none: it is looked up); `sent` is the runner's (frame id,
    text) of each delta it streamed, to rebuild the stream if Redis lost it meanwhile.
    """
    state = await write_retrying(
        f"final write of message {message.pk}",
        save_final,
        message,
        reservation,
        text,
        outcome,
        user=user,
        node=node,
        period=period,
    )
    if message.request_id:
        try:
            await admission.release(message.request_id)
        except RedisError:
            log.warning("admission place of message %s not given back now: its lease lapses instead", message.pk)
    if state == ALREADY_ENDED:
        return False
    frames = [(DELTA, {"text": last_chunk})] if last_chunk else []
    if state == GONE:
        await _finish_stream(message.pk, frames, sent=sent)
        return False
    frames.append((DONE, {"message": message_json(message)}))
    metrics.answer_ended(
        "chat",
        message.status,
        ttft_ms=outcome.ttft_ms,
        prompt_tokens=message.prompt_tokens,
        cached_tokens=message.cached_tokens,
        completion_tokens=message.completion_tokens,
    )
    # A blocked answer's stream is dropped soon, so a later reader is served the saved (empty) answer
    # rather than a replay of the cut text.
    ttl = BLOCKED_STREAM_TTL_SECONDS if message.status == Message.Status.BLOCKED else FINISHED_TTL_SECONDS
    await _finish_stream(message.pk, frames, ttl=ttl, sent=sent)
    await announce_quietly(owner_id, message.conversation_id, message.pk, active=False)
    return True


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

"""Finds generations whose runner died (its process was killed) and ends them as `interrupted`.

A live runner beats a heartbeat every few seconds; a pending or streaming message older than the
heartbeat's lifetime with no live heartbeat has lost its runner. Its partial text is taken from
the token stream, and it is closed the same way a finished answer is (chat.generation.settle), so
readers attached to it get their "done" frame and billing is settled for what was produced, by the
one usage rule: the prompt the engine said it processed (checkpointed with the heartbeat) plus the
tokens of the saved text, counted by the tokenizer of the node that wrote it. A chat still without a
title (its first answer was the one that lost its runner, which would have queued the title) gets
its question's first words, as one whose first answer failed does (`chat.titles`).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from channels.db import database_sync_to_async
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing import services as billing
from chat.generation import engine, settle
from chat.generation.engine import Usage
from chat.generation.streams import DELTA, get_streams, heartbeat_ttl
from chat.models import Message
from chat.titles import title_conversation

log = logging.getLogger(__name__)

#: Saved with the answer outside any request: kept in English, marked for the catalogue (see run.CRASHED).
INTERRUPTED_ERROR = gettext_noop(
    "The server writing this answer stopped before it finished. What it wrote is kept; regenerate for a full answer."
)


def _candidates(grace_seconds: int) -> list[int]:
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    stalled = Message.objects.filter(status__in=Message.ACTIVE_STATUSES, created__lt=cutoff)
    return list(stalled.values_list("id", flat=True))


def _load(message_id: int) -> Message | None:
    """The stalled answer with what settling it reads (its owner, its siblings)."""
    message = Message.objects.select_related("conversation__owner").filter(pk=message_id).first()
    if message is not None:
        message.sibling_ids = list(
            Message.objects.filter(conversation_id=message.conversation_id, parent_id=message.parent_id)
            .order_by("created", "id")
            .values_list("id", flat=True)
        )
    return message


async def reap_stalled(grace_seconds: int | None = None) -> list[int]:
    """End every generation that has lost its runner; returns their message ids.

    Only messages older than `grace_seconds` (default: the heartbeat's lifetime) are looked at, so
    a runner that has not yet beaten for the first time is not mistaken for a dead one.
    """
    streams = get_streams()
    grace_seconds = heartbeat_ttl() if grace_seconds is None else grace_seconds
    candidates = await database_sync_to_async(_candidates)(grace_seconds)
    alive = await streams.alive(candidates)
    reaped = []
    for message_id in candidates:
        if message_id in alive:
            continue
        try:
            if await _reap(streams, message_id):
                reaped.append(message_id)
        except Exception:
            # One answer that cannot be ended must not keep the others from being ended.
            log.exception("could not reap message %s", message_id)
    return reaped


async def _reap(streams, message_id: int) -> bool:
    message = await database_sync_to_async(_load)(message_id)
    if message is None or not message.is_active:
        return False
    frames = await streams.read(message_id)
    streamed = "".join(frame.data.get("text", "") for frame in frames if frame.kind == DELTA)
    text = streamed if len(streamed) >= len(message.content) else message.content
    reservation = billing.Reservation.from_dict(message.reservation) if message.reservation else None
    # What the runner last checkpointed of the engine's counts: the prompt it processed.
    reported = (
        Usage(prompt_tokens=message.prompt_tokens, cached_tokens=message.cached_tokens)
        if message.prompt_tokens
        else None
    )
    job = await database_sync_to_async(engine.job_on_node)(message.node, message.model)
    # An answer that continues an earlier one is billed for what it wrote after that one's text.
    written = text[message.continued_chars :]
    ending = settle.Ending(
        status=settle.INTERRUPTED,
        error=INTERRUPTED_ERROR,
        text=text,
        usage=await settle.billed_usage(
            job,
            written,
            reported,
            final=False,
            prompt_estimate=reservation.prompt_tokens if reservation is not None else 0,
        ),
    )
    owner = message.conversation.owner
    holds = settle.Holds(place=message.request_id)
    ended = await settle.complete(message, reservation, ending, holds, owner_id=owner.pk, user=owner)
    if ended:
        settle.record_metrics("chat", ending)
        await _title_if_untitled(message.conversation_id)
    return ended


async def _title_if_untitled(conversation_id: int) -> None:
    """The title the dead runner would have queued after a first answer: its question's first words (no
    model call, so the reaper never waits on an engine). A chat that has one already is left alone."""
    try:
        await database_sync_to_async(title_conversation, thread_sensitive=False)(conversation_id, ask_model=False)
    except Exception:  # the answer is ended; a title is worth a log line, not the reaper's report
        log.warning("could not title conversation %s after reaping its answer", conversation_id, exc_info=True)

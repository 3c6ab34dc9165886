"""Finds generations whose runner died (its process was killed) and ends them as `interrupted`.

A live runner beats a heartbeat every few seconds; a pending or streaming message older than the
heartbeat's lifetime with no live heartbeat has lost its runner. Its partial text is taken from
the token stream, and it is closed the same way a finished answer is (chat.finish), so readers
attached to it get their "done" frame and billing is settled for what was produced.
"""

from __future__ import annotations

from datetime import timedelta

from asgiref.sync import sync_to_async
from django.utils import timezone

from billing import services as billing
from chat import finish
from chat.models import Message
from chat.streams import DELTA, get_streams, heartbeat_ttl

INTERRUPTED_ERROR = (
    "The server writing this answer stopped before it finished. What it wrote is kept; regenerate for a full answer."
)


def _candidates(grace_seconds: int) -> list[int]:
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    stalled = Message.objects.filter(status__in=Message.ACTIVE_STATUSES, created__lt=cutoff)
    return list(stalled.values_list("id", flat=True))


def _checkpointed_text(message_id: int) -> str:
    return Message.objects.values_list("content", flat=True).get(pk=message_id)


def _reservation_of(message_id: int) -> billing.Reservation:
    return billing.Reservation.from_dict(Message.objects.values_list("reservation", flat=True).get(pk=message_id))


async def reap_stalled(grace_seconds: int | None = None) -> list[int]:
    """End every generation that has lost its runner; returns their message ids.

    Only messages older than `grace_seconds` (default: the heartbeat's lifetime) are looked at, so
    a runner that has not yet beaten for the first time is not mistaken for a dead one.
    """
    streams = get_streams()
    grace_seconds = heartbeat_ttl() if grace_seconds is None else grace_seconds
    candidates = await sync_to_async(_candidates)(grace_seconds)
    alive = await streams.alive(candidates)
    reaped = []
    for message_id in candidates:
        if message_id in alive:
            continue
        frames = await streams.read(message_id)
        streamed = "".join(frame.data.get("text", "") for frame in frames if frame.kind == DELTA)
        checkpointed = await sync_to_async(_checkpointed_text)(message_id)
        text = streamed if len(streamed) >= len(checkpointed) else checkpointed
        reservation = await sync_to_async(_reservation_of)(message_id)
        outcome = finish.Outcome(status=Message.Status.INTERRUPTED, error=INTERRUPTED_ERROR)
        if await finish.complete(message_id, reservation, text, outcome) is not None:
            reaped.append(message_id)
    return reaped

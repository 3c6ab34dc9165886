"""Reads for the moderation queue (selectors only read)."""

from __future__ import annotations

from moderation.models import Flag

#: Messages shown before the flagged one on its review page (and one after: the answer to a question).
TURNS_BEFORE = 4


def turns_around(flag: Flag) -> list:
    """The flagged message with the turns just before it and the one after, oldest first (a selector:
    reads only). The text staff see here includes what was cut from the user's view."""
    message = flag.message
    if message is None:
        return []
    around = message.conversation.messages.order_by("created", "pk")
    before = list(around.filter(created__lte=message.created).exclude(pk=message.pk).reverse()[:TURNS_BEFORE])
    after = list(around.filter(created__gt=message.created)[:1])
    return [*reversed(before), message, *after]

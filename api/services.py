"""Writing what the API keeps: the Responses API's stored responses (kept, deleted, purged)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from accounts.models import User
from api.models import StoredResponse


def store_response(user: User, *, response_id: str, model: str, messages: list[dict], body: dict) -> None:
    """Keep a response for its owner: the conversation it answered (`messages`) and what it returned."""
    StoredResponse.objects.update_or_create(
        pk=response_id, defaults={"user": user, "model": model, "messages": messages, "body": body}
    )


def delete_response(user: User, response_id: str) -> bool:
    """Delete `user`'s stored response; False when there is none of that id (or it is someone else's)."""
    deleted, _ = StoredResponse.objects.filter(pk=response_id, user=user).delete()
    return bool(deleted)


def purge_expired_responses(now: datetime | None = None) -> int:
    """Delete the stored responses older than API_RESPONSES_RETENTION_DAYS; how many were deleted."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.API_RESPONSES_RETENTION_DAYS)
    deleted, _ = StoredResponse.objects.filter(created_at__lt=cutoff).delete()
    return deleted

"""Reading what the API keeps: a stored response, for its owner only."""

from __future__ import annotations

from accounts.models import User
from api.models import StoredResponse


def stored_response(user: User, response_id: str) -> StoredResponse | None:
    """`user`'s stored response `response_id`; None when there is none (or it is someone else's)."""
    return StoredResponse.objects.filter(pk=response_id, user=user).first()

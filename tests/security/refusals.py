"""What a refusal must be on the live server, whatever the attack: the status it should have and a
sentence a person can read (not a stack trace, not a page of HTML)."""

from __future__ import annotations

from collections.abc import Collection

import httpx


def refused_clearly(response: httpx.Response, status: int | Collection[int] = 400) -> dict:
    """Assert that `response` is a refusal with `status` (or one of several) and a short sentence; its error."""
    statuses = (status,) if isinstance(status, int) else status
    assert response.status_code in statuses, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["message"] and len(error["message"]) < 500, error
    return error

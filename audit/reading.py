"""Console pages that show what users wrote ask for a reason first: one flow for all of them (a
conversation's page, the conversation up to a rated answer). The rule and the audit entry are
`audit.services.record_reading`; this only reads the form and says what to show.

Each page includes `admin/console/reason_to_read.html` for the form, and shows the text only when
`Reading.granted`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models
from django.http import HttpRequest

from audit import services
from config.refusals import Refusal


@dataclass(frozen=True)
class Reading:
    """What the page may show: the text only once `granted`; otherwise the form, with `error`."""

    granted: bool
    reason: str = ""
    error: str | None = None


def ask_reason(request: HttpRequest, conversation: models.Model, details: dict[str, Any] | None = None) -> Reading:
    """A reason posted with the form is recorded (`conversation.view`) and grants this one reading; each
    opening asks again. A GET, or a blank reason, grants nothing."""
    if request.method != "POST":
        return Reading(granted=False)
    reason = request.POST.get("reason", "")
    try:
        services.record_reading(request.user, conversation, reason, details)
    except Refusal as refusal:
        return Reading(granted=False, reason=reason.strip(), error=refusal.message)
    return Reading(granted=True, reason=reason.strip())

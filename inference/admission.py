"""Admission control: shed load before it reaches a saturated engine, free tier first.

The app's own count of generations in flight is compared with two thresholds: above the soft one
only premium requests are admitted, above the hard one nobody is, and each refusal says when to
try again. (Per-node load polled from SGLang joins this when the node registry lands.)
"""

from django.conf import settings

from config.refusals import Busy

PREMIUM = "premium"


def in_flight() -> int:
    from chat.models import Message

    return Message.objects.filter(status__in=Message.ACTIVE_STATUSES).count()


def admit_request(priority_class: str) -> None:
    """Raise Busy (503) when the engines have no room for this class of request."""
    running = in_flight()
    if running >= settings.ADMISSION_HARD_LIMIT:
        raise Busy("Every model server is busy right now. Retrying shortly.", retry_after=5)
    if running >= settings.ADMISSION_SOFT_LIMIT and priority_class != PREMIUM:
        raise Busy(
            "The servers are busy, and paid plans go first at busy times. Retrying shortly.",
            retry_after=10,
        )

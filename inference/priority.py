"""The priority each plan's requests carry to SGLang, so premium ones overtake free ones in the engine's
own queue (servers started with --enable-priority-scheduling).

SGLang orders its waiting queue by `priority`, larger values first (unless the server was started
with --schedule-low-priority-values-first); a request without one counts as the least important.
With --max-queued-requests, a full queue gives a more important arrival the place of the least
important waiting request (which ends with 503), so free requests are the ones cut. With
--radix-eviction-policy priority, the same value ranks what a request leaves in the radix cache:
under memory pressure the lowest priority is evicted first (whatever the scheduling direction), so
a paid conversation's history stays cached through free traffic.
"""

from __future__ import annotations

from django.conf import settings

#: Larger goes first; the gap leaves room for classes in between. "internal" is the product's own
#: work (conversation titles and summaries): behind every person's request.
PRIORITIES = {"premium": 10, "free": 0, "internal": -10}


def engine_priority(priority_class: str) -> int | None:
    """The `priority` to send for a plan's class, or None when INFERENCE_SEND_PRIORITY is off."""
    if not settings.INFERENCE_SEND_PRIORITY:
        return None
    return PRIORITIES.get(priority_class, PRIORITIES["free"])

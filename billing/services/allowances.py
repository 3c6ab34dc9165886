"""What one person may make, per plan: new chats a day, new shared links a day, and API keys.

Nothing else a user makes grows without bound: messages are counted by the requests a minute and the
monthly tokens; feedback and reports are one per answer; renames, pins and a chat's system prompt
change a row in place (docs/billing.md, "What a person may make"). These three did, and a probe made
150 chats with 4 KB system prompts in a second and a half.

- **New chats a day** (`Plan.new_chats_per_day`): a moving 24-hour window, not a total. People keep
  years of history, so a total would one day refuse someone for having used the product; a day's
  number bounds how fast the tables grow (at most that many rows, each with a system prompt of at most
  CHAT_MAX_SYSTEM_PROMPT_CHARS, a day) without touching what is already there. Deleting a chat gives
  nothing back, so making and deleting cannot churn without end.
- **New shared links a day**: the same number. A chat has one working link; only revoking it and
  sharing again makes a row, and that loop had no end.
- **API keys** (`Plan.max_api_keys`): a total of active keys (a key is a credential to keep track of,
  and revoking one frees its place), and at most twice that many made in any 24 hours, enough to
  replace every key once after a leak: revoked keys stay listed, so revoke-and-make had no end either.

The two daily windows use the rate limits' moving-window limiter under their own scopes (Redis where
REDIS_URL is set, process memory otherwise); API keys are counted in the database, where every key
stays. RATELIMIT_ENABLE=0 switches off the daily windows, never the cap on active keys.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from limits import RateLimitItemPerDay
from limits.errors import StorageError

from billing import selectors
from billing.models import Plan
from billing.services.rate_limits import moving_window_limiter
from config.refusals import Busy, NotAllowed, RateLimited
from config.text import grouped

SCOPE_NEW_CHATS = "new-chats"
SCOPE_NEW_SHARED_LINKS = "new-shared-links"
DAY = timedelta(days=1)
STORE_DOWN_RETRY_AFTER = 5


class NewChatLimit(RateLimited):
    code = "new_chat_limit"


class SharedLinkLimit(RateLimited):
    code = "shared_link_limit"


class ApiKeyLimit(NotAllowed):
    """As many active keys as the plan allows: retrying will not help, revoking one will."""

    code = "api_key_limit"


class ApiKeysMadeLimit(RateLimited):
    code = "api_key_limit"


class _PerDay(RateLimitItemPerDay):
    """Keyed by scope and who only (not by the number, as `limits` would): a plan change keeps the
    day's count, so switching plans never hands out a fresh day."""

    def key_for(self, *identifiers: str) -> str:
        return "/".join(identifiers)


def in_words(seconds: int) -> str:
    """A wait in words: "40 seconds", "12 minutes", "5 hours" (rounded up, so never too early)."""
    if seconds < 60:
        return ngettext("%(count)s second", "%(count)s seconds", seconds) % {"count": seconds}
    minutes = math.ceil(seconds / 60)
    if minutes < 90:
        return ngettext("%(count)s minute", "%(count)s minutes", minutes) % {"count": minutes}
    hours = math.ceil(seconds / 3600)
    return ngettext("%(count)s hour", "%(count)s hours", hours) % {"count": hours}


#: Said when a daily window cannot be counted (its store is down), by scope.
_CANNOT_COUNT = {
    SCOPE_NEW_CHATS: gettext_lazy("New chats cannot be counted right now. Try again in a few seconds."),
    SCOPE_NEW_SHARED_LINKS: gettext_lazy("New shared links cannot be counted right now. Try again in a few seconds."),
}


def _count_in_day(scope: str, user, allowed: int) -> int | None:
    """Count one in the user's 24-hour window of `scope`; None when it fits, else the seconds until
    the oldest counted one leaves the window (nothing is counted then)."""
    if not settings.RATELIMIT_ENABLE:
        return None
    rate, who = _PerDay(allowed), f"user:{user.pk}"
    limiter = moving_window_limiter()
    try:
        if limiter.hit(rate, scope, who):
            return None
        reset_time = limiter.get_window_stats(rate, scope, who).reset_time
    except StorageError as error:
        raise Busy(_CANNOT_COUNT[scope], retry_after=STORE_DOWN_RETRY_AFTER) from error
    return max(1, math.ceil(reset_time - time.time()))


def count_new_chat(user, plan: Plan) -> None:
    """Count a chat `user` is starting; NewChatLimit (429, Retry-After) when it would be one more than
    the plan's new chats in any 24 hours. Busy (503) when the count cannot be reached."""
    allowed = plan.new_chats_per_day
    wait = _count_in_day(SCOPE_NEW_CHATS, user, allowed)
    if wait is None:
        return
    reached = ngettext(
        "You started %(count)s new chat in the last 24 hours, the most the %(plan)s plan allows.",
        "You started %(count)s new chats in the last 24 hours, the most the %(plan)s plan allows.",
        allowed,
    ) % {"count": grouped(allowed), "plan": plan.name}
    better = selectors.cheapest_plan_with_more(plan, "new_chats_per_day")
    if better is not None:
        then = _(
            "You can start another in %(wait)s; until then, keep writing in the chats you have, or upgrade to "
            "%(better)s for %(more)s a day."
        ) % {"wait": in_words(wait), "better": better.name, "more": grouped(better.new_chats_per_day)}
    else:
        then = _("You can start another in %(wait)s; until then, keep writing in the chats you have.") % {
            "wait": in_words(wait)
        }
    raise NewChatLimit(f"{reached} {then}", retry_after=wait, limit=allowed, plan=plan.slug)


def count_new_shared_link(user, plan: Plan) -> None:
    """Count a new shared link (a row: sharing a chat whose link works updates that link and is not
    counted); SharedLinkLimit (429) beyond the plan's new chats a day."""
    allowed = plan.new_chats_per_day
    wait = _count_in_day(SCOPE_NEW_SHARED_LINKS, user, allowed)
    if wait is None:
        return
    reached = ngettext(
        "You made %(count)s new shared link in the last 24 hours, the most the %(plan)s plan allows (as many as "
        "new chats).",
        "You made %(count)s new shared links in the last 24 hours, the most the %(plan)s plan allows (as many as "
        "new chats).",
        allowed,
    ) % {"count": grouped(allowed), "plan": plan.name}
    better = selectors.cheapest_plan_with_more(plan, "new_chats_per_day")
    if better is not None:
        then = _("You can make another in %(wait)s, or upgrade to %(better)s for %(more)s a day.") % {
            "wait": in_words(wait),
            "better": better.name,
            "more": grouped(better.new_chats_per_day),
        }
    else:
        then = _("You can make another in %(wait)s.") % {"wait": in_words(wait)}
    raise SharedLinkLimit(f"{reached} {then}", retry_after=wait, limit=allowed, plan=plan.slug)


def check_api_key_allowance(plan: Plan, *, active: int, made: list[datetime], now: datetime) -> None:
    """May one more API key be made? `active` is how many of the person's keys work now (neither revoked
    nor expired), `made` when each key made in the last 24 hours was made (revoked ones too). The caller
    holds a lock on the person while it counts and saves, so two requests cannot both take the last place.

    ApiKeyLimit (403) at the plan's active keys; ApiKeysMadeLimit (429, Retry-After) at twice that many
    made in 24 hours."""
    allowed = plan.max_api_keys
    if active >= allowed:
        reached = ngettext(
            "You have %(count)s active API key, the most the %(plan)s plan allows.",
            "You have %(count)s active API keys, the most the %(plan)s plan allows.",
            active,
        ) % {"count": grouped(active), "plan": plan.name}
        better = min(
            (
                p
                for p in selectors.public_plans()
                if p.allows_api_keys and p.max_api_keys > allowed and selectors.is_upgrade(p, plan)
            ),
            key=lambda p: (p.monthly_price_cents, p.sort_order),
            default=None,
        )
        if better is not None:
            then = _("Revoke one you no longer use, or upgrade to %(better)s for %(more)s.") % {
                "better": better.name,
                "more": grouped(better.max_api_keys),
            }
        else:
            then = _("Revoke one you no longer use.")
        raise ApiKeyLimit(f"{reached} {then}", limit=allowed, plan=plan.slug)
    recent = [moment for moment in made if moment > now - DAY]
    if settings.RATELIMIT_ENABLE and len(recent) >= 2 * allowed:
        wait = max(1, math.ceil((min(recent) + DAY - now).total_seconds()))
        reached = ngettext(
            "You made %(made)s API keys in the last 24 hours, twice the %(count)s active key the %(plan)s plan "
            "allows (enough to replace each once).",
            "You made %(made)s API keys in the last 24 hours, twice the %(count)s active keys the %(plan)s plan "
            "allows (enough to replace each once).",
            allowed,
        ) % {"made": grouped(len(recent)), "count": grouped(allowed), "plan": plan.name}
        then = _("You can make another in %(wait)s.") % {"wait": in_words(wait)}
        raise ApiKeysMadeLimit(f"{reached} {then}", retry_after=wait, limit=2 * allowed, plan=plan.slug)

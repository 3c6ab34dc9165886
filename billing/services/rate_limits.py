"""Rate limits: one check for every transport (page, SSE, WebSocket, API), with the rate set by the plan.

Built on django-ratelimit's core (fixed windows in the shared cache, which is Redis wherever
REDIS_URL is set). Its core only touches the "request" through the key and rate callables given to
it, so a small subject object stands in for one: a WebSocket message or an API call has no
HttpRequest, yet is counted in the same window as a page request.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from django_ratelimit.core import get_usage

from billing import selectors
from billing.models import Plan
from config.refusals import Busy, RateLimited


@dataclass(frozen=True)
class _Subject:
    plan: Plan
    key: str


def _rate(group: str, subject: _Subject) -> str:
    return f"{subject.plan.requests_per_minute}/m"


def _key(group: str, subject: _Subject) -> str:
    return subject.key


def _network(ip: str) -> str:
    """IPv6 clients usually hold a whole /64, so one of them is one network, not 2**64 addresses."""
    address = ipaddress.ip_address(ip)
    if address.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False).network_address)
    return str(address)


def _subject(user, api_key_id: int | None, ip: str | None) -> _Subject:
    signed_in = user is not None and user.is_authenticated
    plan = selectors.effective_plan(user) if signed_in else selectors.default_plan()
    if api_key_id is not None:
        return _Subject(plan, f"api-key:{api_key_id}")
    if signed_in:
        return _Subject(plan, f"user:{user.pk}")
    if ip:
        return _Subject(plan, f"ip:{_network(ip)}")
    raise ValueError("An anonymous request must be rate limited by its IP address.")


def _message(subject: _Subject, retry_after: int, signed_in: bool) -> str:
    plan = subject.plan
    who = "This API key" if subject.key.startswith("api-key:") else "You"
    message = (
        f"{who} reached the limit of {plan.requests_per_minute} requests a minute of the {plan.name} plan. "
        f"Try again in {retry_after} second{'s' if retry_after != 1 else ''}"
    )
    better = selectors.cheapest_plan_with_more(plan, "requests_per_minute")
    if better is not None:
        action = "upgrade to" if signed_in else "sign in and choose"
        message += f", or {action} {better.name} for {better.requests_per_minute} a minute"
    return message + "."


def check_rate_limit(*, user, api_key_id: int | None = None, ip: str | None = None, scope: str = "chat") -> None:
    """Count one request against the plan's per-minute limit; raise RateLimited (429) beyond it.

    Keyed by API key when the request carries one, else by user, else (anonymous) by IP network.
    Every transport of one kind of request passes the same `scope`, so they share one window.
    """
    subject = _subject(user, api_key_id, ip)
    usage = get_usage(subject, group=f"billing.{scope}", key=_key, rate=_rate, increment=True)
    if usage is None:  # RATELIMIT_ENABLE is off
        return
    if usage["time_left"] < 0:
        # django-ratelimit's signal that the cache could not be read or written.
        raise Busy("Request limits cannot be checked right now. Try again in a few seconds.", retry_after=5)
    if usage["should_limit"]:
        retry_after = max(int(usage["time_left"]), 1)
        signed_in = user is not None and user.is_authenticated
        raise RateLimited(_message(subject, retry_after, signed_in), retry_after=retry_after,
                          limit=subject.plan.requests_per_minute, plan=subject.plan.slug)


"""Reads for the staff dashboard: today's figures and the service over the last hour.

From the database: users, plans, messages (questions, answers, time to first token), the usage
ledger (tokens, prefix-cache hits, API completions) and moderation flags. From Redis (or this
process's memory in the embedded default): refusals per minute (config.refusal_counts), the sampled
load per minute (console.service_load), generations in flight now. From the fleet snapshot: each
node's health and current load.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TypeVar

from django.db import connection
from django.db.models import Aggregate, Count, F, FloatField, Q, Sum
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone
from redis.exceptions import RedisError

from accounts.models import User
from billing.models import Subscription, UsageRecord
from billing.selectors import current_period, default_plan, plans_and_usage, scheduled_change
from chat.generation import admission
from chat.generation.engine import CACHE_NODE
from chat.models import Conversation, Message
from config import refusal_counts
from console import service_load
from inference import fleet
from inference.fleet import NodeView
from moderation.models import Flag

log = logging.getLogger(__name__)

MINUTES = 60
#: An answer is counted in the minute it finished; the search for them is bounded by the indexed
#: creation time, so an answer that took longer than this to write is left out of the TTFT chart.
LONGEST_ANSWER = timedelta(hours=1)
T = TypeVar("T")


class PercentileCont(Aggregate):
    """PostgreSQL's percentile_cont: the value at `fraction` of the ordered values, interpolated."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, **extra):
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


def percentile(ordered: list[int | float], fraction: float) -> float | None:
    """The same figure as percentile_cont, over values already sorted (None for no values)."""
    if not ordered:
        return None
    position = fraction * (len(ordered) - 1)
    below, above = math.floor(position), math.ceil(position)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _minutes(since: datetime, rows, key: str) -> list[int]:
    counts = {row["minute"]: row[key] for row in rows}
    return [counts.get(since + timedelta(minutes=n), 0) for n in range(MINUTES)]


def _ms(value: float | None) -> int | None:
    return None if value is None else round(value)


def _percent(part: float | None, whole: float | None = 1) -> float | None:
    return None if part is None or not whole else round(100 * part / whole, 1)


def _answers_with_ttft(first_minute: datetime):
    """The answers an engine wrote (one replayed from the response cache had no engine to wait for)."""
    return Message.objects.filter(
        role=Message.Role.ASSISTANT,
        created__gte=first_minute - LONGEST_ANSWER,
        finished__gte=first_minute,
        ttft_ms__isnull=False,
    ).exclude(node=CACHE_NODE)


def time_to_first_token(first_minute: datetime) -> dict:
    """TTFT p50 and p95 (ms) of the answers that finished in each minute from `first_minute`, and over
    the whole hour: in SQL with percentile_cont on PostgreSQL (two queries), else over the hour's
    values in Python (one query; the embedded default's SQLite, one process's traffic)."""
    answers = _answers_with_ttft(first_minute)
    if connection.vendor == "postgresql":
        rows = {
            row["minute"]: row
            for row in answers.annotate(minute=TruncMinute("finished"))
            .values("minute")
            .annotate(p50=PercentileCont("ttft_ms", 0.5), p95=PercentileCont("ttft_ms", 0.95))
        }
        hour = answers.aggregate(p50=PercentileCont("ttft_ms", 0.5), p95=PercentileCont("ttft_ms", 0.95))
    else:
        by_minute: dict[int, list[int]] = defaultdict(list)
        values = []
        for finished, ttft in answers.values_list("finished", "ttft_ms"):
            by_minute[int((finished - first_minute).total_seconds() // 60)].append(ttft)
            values.append(ttft)
        rows = {
            first_minute + timedelta(minutes=n): {"p50": percentile(sorted(v), 0.5), "p95": percentile(sorted(v), 0.95)}
            for n, v in by_minute.items()
        }
        values.sort()
        hour = {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95)}
    minutes = [rows.get(first_minute + timedelta(minutes=n), {}) for n in range(MINUTES)]
    return {
        "p50": [_ms(row.get("p50")) for row in minutes],
        "p95": [_ms(row.get("p95")) for row in minutes],
        "hour_p50": _ms(hour["p50"]),
        "hour_p95": _ms(hour["p95"]),
    }


def _moderation(first_minute: datetime) -> tuple[dict[str, list[int]], list[dict]]:
    """Flags per minute by source, and the hour's flags by category (one query)."""
    rows = (
        Flag.objects.filter(created__gte=first_minute)
        .annotate(minute=TruncMinute("created"))
        .values("minute", "source", "category", "blocked")
        .annotate(flags=Count("pk"))
    )
    sources = [choice.value for choice in Flag.Source]
    per_minute = {source: [0] * MINUTES for source in sources}
    categories: dict[str, dict] = {}
    for row in rows:
        n = int((row["minute"] - first_minute).total_seconds() // 60)
        if 0 <= n < MINUTES:
            per_minute[row["source"]][n] += row["flags"]
        category = categories.setdefault(
            row["category"] or "uncategorised",
            {"category": row["category"] or "uncategorised", **dict.fromkeys(sources, 0), "blocked": 0, "total": 0},
        )
        category[row["source"]] += row["flags"]
        category["total"] += row["flags"]
        category["blocked"] += row["flags"] if row["blocked"] else 0
    return per_minute, sorted(categories.values(), key=lambda c: (-c["total"], c["category"]))


def _node(node: NodeView) -> dict:
    load = node.load
    state = "draining" if node.draining else "serving" if node.enabled else "disabled"
    return {
        "name": node.name,
        "group": node.group,
        "health": node.health,
        "state": state,
        "routable": node.routable,
        "models": list(node.models),
        "load": None
        if load is None
        else {
            "running": load.running_requests,
            "waiting": load.waiting_requests,
            "max_running": load.max_running_requests,
            "token_usage": _percent(load.token_usage),
            "cache_hit_rate": _percent(load.cache_hit_rate),
            "gen_throughput": None if load.gen_throughput is None else round(load.gen_throughput, 1),
        },
    }


def _from_redis(read: Callable[..., T], *args) -> T | None:
    """A figure kept in Redis, or None when Redis cannot answer (the rest of the dashboard still shows)."""
    try:
        return read(*args)
    except RedisError as exc:
        log.warning("dashboard: %s unavailable: %s", getattr(read, "__qualname__", read), exc)
        return None


def _sum(values: Iterable[int | None]) -> int:
    return sum(value or 0 for value in values)


def dashboard(now: datetime | None = None) -> dict:
    """Everything the dashboard shows, as plain JSON-ready values: a fixed number of database queries
    (twelve on PostgreSQL, eleven elsewhere, plus the fleet snapshot's when its cache is cold) and three
    Redis round trips."""
    now = now or timezone.now()
    hour_ago, day_ago = now - timedelta(hours=1), now - timedelta(days=1)
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)

    users = User.objects.aggregate(
        total=Count("pk"),
        joined_today=Count("pk", filter=Q(date_joined__gte=midnight)),
        suspended=Count("pk", filter=Q(is_suspended=True)),
    )

    by_plan = list(
        Subscription.objects.granting(now)
        .values("plan__name")
        .annotate(users=Count("user", distinct=True))
        .order_by("-users", "plan__name")
    )
    subscribed = sum(row["users"] for row in by_plan)
    plans = [{"plan": row["plan__name"], "users": row["users"]} for row in by_plan]
    plans.append({"plan": f"{default_plan().name} (no subscription)", "users": max(users["total"] - subscribed, 0)})

    messages = Message.objects.filter(created__gte=day_ago).aggregate(
        questions_hour=Count("pk", filter=Q(role=Message.Role.USER, created__gte=hour_ago)),
        questions_day=Count("pk", filter=Q(role=Message.Role.USER)),
        answers_hour=Count("pk", filter=Q(role=Message.Role.ASSISTANT, created__gte=hour_ago)),
        answers_day=Count("pk", filter=Q(role=Message.Role.ASSISTANT)),
        failed_day=Count("pk", filter=Q(role=Message.Role.ASSISTANT, status=Message.Status.FAILED)),
        in_flight=Count("pk", filter=Q(status__in=Message.ACTIVE_STATUSES)),
    )

    # What moderation blocked: one blocked flag per question refused or answer cut (moderation.services.record),
    # counted as the hour's table beside it counts them.
    blocked = Flag.objects.filter(created__gte=day_ago, blocked=True).aggregate(
        questions=Count("pk", filter=Q(source=Flag.Source.INPUT)),
        answers=Count("pk", filter=Q(source=Flag.Source.OUTPUT)),
    )

    tokens = UsageRecord.objects.filter(created__gte=midnight).aggregate(
        billable=Sum("billable_tokens"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
    )

    first_minute = (now - timedelta(minutes=MINUTES - 1)).replace(second=0, microsecond=0)
    epoch_minute = int(first_minute.timestamp()) // 60
    per_minute = (
        Message.objects.filter(created__gte=first_minute)
        .annotate(minute=TruncMinute("created"))
        .values("minute")
        .annotate(
            questions=Count("pk", filter=Q(role=Message.Role.USER)),
            answers=Count("pk", filter=Q(role=Message.Role.ASSISTANT)),
        )
    )
    per_minute = list(per_minute)
    # The ledger has a line for every answer and API completion, written when it ended. The engines'
    # work is the lines they wrote; an answer replayed from the response cache ran on none.
    engine = Q(from_cache=False)
    ledger = list(
        UsageRecord.objects.filter(created__gte=first_minute)
        .annotate(minute=TruncMinute("created"))
        .values("minute")
        .annotate(
            prompt=Sum("prompt_tokens", filter=engine, default=0),
            cached=Sum("cached_tokens", filter=engine, default=0),
            completion=Sum("completion_tokens", filter=engine, default=0),
            api=Count("pk", filter=Q(api_key_id__isnull=False)),
            from_cache=Count("pk", filter=Q(from_cache=True)),
        )
    )
    ledger_by_minute = {row["minute"]: row for row in ledger}
    ledger_minutes = [ledger_by_minute.get(first_minute + timedelta(minutes=n)) for n in range(MINUTES)]
    prompt_hour, cached_hour = _sum(r["prompt"] for r in ledger), _sum(r["cached"] for r in ledger)
    completion_hour = _sum(r["completion"] for r in ledger)
    ttft = time_to_first_token(first_minute)
    moderation, moderation_categories = _moderation(first_minute)
    per_hour = {
        row["hour"]: row
        for row in UsageRecord.objects.filter(created__gte=midnight)
        .annotate(hour=TruncHour("created"))
        .values("hour")
        .annotate(
            tokens=Sum("billable_tokens"),
            # Engine work saved: prompt tokens the engines' prefix caches served, and whole answers
            # (prompt and completion) the response cache replayed.
            saved_prefix=Sum("cached_tokens", filter=engine, default=0),
            saved_answers=Sum(F("prompt_tokens") + F("completion_tokens"), filter=Q(from_cache=True), default=0),
            # Engine work moved to cheaper GPUs: the tokens of turns Auto judged easy, on the small model.
            auto_small=Sum(
                F("prompt_tokens") + F("completion_tokens"), filter=engine & Q(auto_route="easy"), default=0
            ),
        )
    }
    hours = [midnight + timedelta(hours=n) for n in range(timezone.localtime(now).hour + 1)]

    refused = _from_redis(refusal_counts.per_minute, epoch_minute, MINUTES) or {}
    load_history = _from_redis(service_load.per_minute, epoch_minute, MINUTES) or {}
    nodes = [_node(node) for node in fleet.snapshot()]
    loads = [node["load"] for node in nodes if node["load"] is not None]

    return {
        "generated_at": now.isoformat(),
        "users": users,
        "plans": plans,
        "messages": messages,
        "blocked": {"day": blocked["questions"] + blocked["answers"], **blocked},
        "tokens_today": {key: value or 0 for key, value in tokens.items()},
        "service": {
            "generating": _from_redis(admission.in_flight),
            "running": sum(load["running"] for load in loads) if loads else None,
            "waiting": sum(load["waiting"] for load in loads) if loads else None,
            "ttft_p50": ttft["hour_p50"],
            "ttft_p95": ttft["hour_p95"],
            "tokens_per_second": round(completion_hour / (MINUTES * 60), 1),
            "cache_hit_rate": _percent(cached_hour, prompt_hour),
            "answered_from_cache": _sum(r["from_cache"] for r in ledger),
            "refused_429": _sum(refused.get("429", [])) if refused else None,
            "refused_503": _sum(refused.get("503", [])) if refused else None,
            "flags": sum(sum(series) for series in moderation.values()),
        },
        "nodes": nodes,
        "moderation_categories": moderation_categories,
        "last_hour": {
            "labels": [
                timezone.localtime(first_minute + timedelta(minutes=n)).strftime("%H:%M") for n in range(MINUTES)
            ],
            "questions": _minutes(first_minute, per_minute, "questions"),
            "answers": _minutes(first_minute, per_minute, "answers"),
            "api": [row["api"] if row else 0 for row in ledger_minutes],
            "from_cache": [row["from_cache"] if row else 0 for row in ledger_minutes],
            "ttft_p50": ttft["p50"],
            "ttft_p95": ttft["p95"],
            "tokens_per_second": [round(row["completion"] / 60, 1) if row else 0 for row in ledger_minutes],
            "cache_hit_rate": [_percent(row["cached"], row["prompt"]) if row else None for row in ledger_minutes],
            "refused": refused or None,
            "moderation": moderation,
            "in_flight": load_history.get("in_flight"),
            "nodes": load_history.get("nodes"),
        },
        "today": {
            "labels": [timezone.localtime(hour).strftime("%H:00") for hour in hours],
            "tokens": [per_hour[hour]["tokens"] if hour in per_hour else 0 for hour in hours],
            "saved_prefix": [per_hour[hour]["saved_prefix"] if hour in per_hour else 0 for hour in hours],
            "saved_answers": [per_hour[hour]["saved_answers"] if hour in per_hour else 0 for hour in hours],
            "auto_small": [per_hour[hour]["auto_small"] if hour in per_hour else 0 for hour in hours],
        },
    }


def user_overview(user: User, now: datetime | None = None) -> dict:
    """What staff need about one person on their page: plan and where the period stands, what is
    scheduled, usage, API keys, recent activity and moderation flags. Never what they wrote: the
    conversations are listed by number, model and size (reading one needs a reason, chat.admin)."""
    now = now or timezone.now()
    billing = current_period(user, now)
    keys = user.api_keys.all()
    usable = Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    newest = list(user.conversations.order_by("-updated").values_list("pk", flat=True)[:5])
    recent = Conversation.objects.filter(pk__in=newest).annotate(messages_count=Count("messages")).order_by("-updated")
    flags = Flag.objects.filter(user=user)
    return {
        "person": user,
        "billing": billing,
        "scheduled": scheduled_change(billing),
        "usage": plans_and_usage([user], now).get(user.pk),
        "keys": list(keys.order_by("-created")[:10]),
        "key_counts": keys.aggregate(all=Count("pk"), active=Count("pk", filter=usable)),
        "conversations": list(recent),
        "conversation_count": user.conversations.count(),
        "ledger": list(UsageRecord.objects.filter(user=user).order_by("-created")[:5]),
        "flags": list(flags.order_by("-created")[:5]),
        "flag_counts": flags.aggregate(
            month=Count("pk", filter=Q(created__gte=now - timedelta(days=30))),
            blocked=Count("pk", filter=Q(blocked=True, created__gte=now - timedelta(days=30))),
            open=Count("pk", filter=Q(state=Flag.State.OPEN)),
        ),
    }

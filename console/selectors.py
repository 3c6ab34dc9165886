"""Reads for the staff dashboard: today's figures from the database and the usage ledger."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from accounts.models import User
from billing.models import Subscription, UsageRecord
from billing.selectors import default_plan
from chat.models import Message


def _minutes(since: datetime, rows, key: str) -> list[int]:
    counts = {row["minute"]: row[key] for row in rows}
    return [counts.get(since + timedelta(minutes=n), 0) for n in range(60)]


def dashboard(now: datetime | None = None) -> dict:
    """Everything the dashboard shows, as plain JSON-ready values (a fixed number of queries)."""
    now = now or timezone.now()
    hour_ago, day_ago = now - timedelta(hours=1), now - timedelta(days=1)
    midnight = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)

    users = User.objects.aggregate(
        total=Count("pk"),
        joined_today=Count("pk", filter=Q(date_joined__gte=midnight)),
        suspended=Count("pk", filter=Q(is_suspended=True)),
    )

    by_plan = list(
        Subscription.objects.granting(now).values("plan__name").annotate(users=Count("user", distinct=True))
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
        blocked_day=Count("pk", filter=Q(status=Message.Status.BLOCKED)),
        in_flight=Count("pk", filter=Q(status__in=Message.ACTIVE_STATUSES)),
    )

    tokens = UsageRecord.objects.filter(created__gte=midnight).aggregate(
        billable=Sum("billable_tokens"), prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"),
    )

    first_minute = (now - timedelta(minutes=59)).replace(second=0, microsecond=0)
    per_minute = (
        Message.objects.filter(created__gte=first_minute)
        .annotate(minute=TruncMinute("created")).values("minute")
        .annotate(questions=Count("pk", filter=Q(role=Message.Role.USER)),
                  answers=Count("pk", filter=Q(role=Message.Role.ASSISTANT)))
    )
    per_minute = list(per_minute)
    per_hour = {
        row["hour"]: row["tokens"] for row in
        UsageRecord.objects.filter(created__gte=midnight).annotate(hour=TruncHour("created"))
        .values("hour").annotate(tokens=Sum("billable_tokens"))
    }
    hours = [midnight + timedelta(hours=n) for n in range(timezone.localtime(now).hour + 1)]

    return {
        "generated_at": now.isoformat(),
        "users": users,
        "plans": plans,
        "messages": messages,
        "tokens_today": {key: value or 0 for key, value in tokens.items()},
        "last_hour": {
            "labels": [timezone.localtime(first_minute + timedelta(minutes=n)).strftime("%H:%M") for n in range(60)],
            "questions": _minutes(first_minute, per_minute, "questions"),
            "answers": _minutes(first_minute, per_minute, "answers"),
        },
        "today": {
            "labels": [timezone.localtime(hour).strftime("%H:00") for hour in hours],
            "tokens": [per_hour.get(hour, 0) for hour in hours],
        },
    }

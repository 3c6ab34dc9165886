"""The benchmark's data, through the product's own models and services, in the bench database only.

Call :func:`configure` first (it points Django at the bench database and sets it up); everything
else here is plain synchronous ORM code, run outside the event loop.
"""

from __future__ import annotations

import importlib
import os
import time
import uuid
from collections import Counter
from datetime import timedelta
from urllib.parse import urlsplit

import psycopg

from bench.load import Account

BENCH_PLANS = {
    # Every limit out of the way except the one each phase measures.
    "bench-premium": {"priority_class": "premium"},
    "bench-free": {"priority_class": "free"},
}
FINAL_STATUSES = {"completed", "stopped", "failed", "interrupted", "blocked"}


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def check_safe(database_url: str, redis_url: str) -> None:
    """Refuse to wipe anything that does not look like a benchmark's own store."""
    name = database_name(database_url)
    if "bench" not in name:
        raise SystemExit(
            f"Refusing to reset database {name!r}: the bench database's name must contain 'bench' "
            "(it is dropped and created anew on every run)."
        )
    db = urlsplit(redis_url).path.lstrip("/")
    if not db.isdigit() or db == "0":
        raise SystemExit(
            f"Refusing to flush Redis {redis_url!r}: give the bench its own numbered database (not 0), "
            "e.g. redis://127.0.0.1:6379/9."
        )


def reset_database(admin_url: str, connection_limit: int) -> str:
    """Drop and create the bench database, so every run starts from the same empty state.

    The product connects as a role of the same name that may hold at most ``connection_limit``
    connections: the PostgreSQL server is shared, and a product that opens one connection per
    request must not take every slot from everyone else (superusers are exempt from such limits,
    hence the role). Returns the URL the product and this process use.
    """
    name = database_name(admin_url)
    parts = urlsplit(admin_url)
    with psycopg.connect(admin_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE ROLE "{name}" LOGIN')
        conn.execute(f'ALTER ROLE "{name}" NOSUPERUSER CONNECTION LIMIT {int(connection_limit)}')
        conn.execute(f'CREATE DATABASE "{name}" OWNER "{name}"')
    host = parts.hostname or "127.0.0.1"
    return f"postgres://{name}@{host}:{parts.port or 5432}/{name}"


def driver_url(admin_url: str) -> str:
    """How this process connects: as the superuser (outside the product's connection limit, so it
    can always look), acting as the bench role (so what it creates belongs to the product)."""
    return f"{admin_url}?options=-c%20role%3D{database_name(admin_url)}"


def flush_redis(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()


def configure(env: dict[str, str]) -> None:
    """Point this process's Django at the bench database (the same settings Daphne gets) and set it up."""
    os.environ.update(env)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    import logging

    import django

    django.setup()
    # The product's logging config is for Daphne; this process only drives it.
    logging.getLogger().setLevel(logging.WARNING)
    for name in ("httpx", "httpcore", "matplotlib", "django", "celery"):
        logging.getLogger(name).setLevel(logging.WARNING)


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)


def versions() -> dict:
    import daphne
    import django
    import redis
    from django.conf import settings
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0]
        cursor.execute("SHOW max_connections")
        max_connections = int(cursor.fetchone()[0])
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        redis_version = client.info("server").get("redis_version", "")
    finally:
        client.close()
    return {
        "postgresql": postgres,
        "postgresql_max_connections": max_connections,
        "redis": redis_version,
        "django": django.get_version(),
        "daphne": daphne.__version__,
    }


def create_plans(max_output_tokens: int = 4096) -> None:
    from billing.models import Plan
    from billing.seed import seed_plans

    seed_plans(Plan)
    for slug, figures in BENCH_PLANS.items():
        Plan.objects.update_or_create(
            slug=slug,
            defaults={
                "name": slug.replace("-", " ").title(),
                "description": "Benchmark plan: limits out of the way.",
                "monthly_price_cents": 100,
                "all_models": True,
                "model_ids": [],
                "requests_per_minute": 10_000_000,
                "answers_at_once": 32_767,  # the field's largest
                "new_chats_per_day": 10_000_000,  # every benchmark request starts a new chat
                "max_api_keys": 32_767,
                "tokens_per_month": 10**15,
                "max_output_tokens": max_output_tokens,
                "max_context_tokens": 32768,
                "allows_api_keys": True,
                "is_public": False,
                "is_default": False,
                **figures,
            },
        )


def create_accounts(prefix: str, count: int, plan_slug: str, *, api_keys: bool = True) -> list[Account]:
    """``count`` users on ``plan_slug``, each with a signed-in session and (optionally) an API key."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.hashers import make_password
    from django.utils import timezone
    from django.utils.crypto import get_random_string

    from accounts.api_keys import create_api_key
    from accounts.models import User
    from billing.models import Plan, Subscription

    plan = Plan.objects.get(slug=plan_slug)
    unusable = make_password(None)
    users = User.objects.bulk_create(
        [
            User(email=f"{prefix}-{i}@bench.example", password=unusable, display_name=f"{prefix} {i}")
            for i in range(count)
        ]
    )
    now = timezone.now()
    Subscription.objects.bulk_create(
        [
            Subscription(
                user=user,
                plan=plan,
                status=Subscription.Status.ACTIVE,
                provider=Subscription.Provider.DEV,
                provider_subscription_id=f"bench-{uuid.uuid4().hex}",
                current_period_start=now,
                current_period_end=now + timedelta(days=30),
            )
            for user in users
        ]
    )
    store_class = importlib.import_module(settings.SESSION_ENGINE).SessionStore
    accounts = []
    for user in users:
        session = store_class()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        csrf = get_random_string(32)
        key = create_api_key(user, "bench")[1] if api_keys else ""
        accounts.append(
            Account(
                user_id=user.pk,
                email=user.email,
                priority=plan.priority_class,
                api_key=key,
                csrf=csrf,
                cookie=f"{settings.SESSION_COOKIE_NAME}={session.session_key}; {settings.CSRF_COOKIE_NAME}={csrf}",
            )
        )
    return accounts


# -- history at scale --------------------------------------------------------------------------------


def create_history(owner: Account, conversations: int, messages: int, words: int = 60) -> int:
    """``conversations`` conversations for the owner, one of them ``messages`` long; returns its id."""
    from django.db import transaction
    from django.utils import timezone

    from chat.models import Conversation, Message

    text = " ".join(["The harbour master counts the boats and writes their names in the book."] * (words // 12))
    started = timezone.now() - timedelta(days=400)
    Conversation.objects.bulk_create(
        [
            Conversation(owner_id=owner.user_id, title=f"Conversation {i}", model="sim-small")
            for i in range(conversations - 1)
        ],
        batch_size=2000,
    )
    # Spread their activity over a year, as a real sidebar would be.
    with transaction.atomic():
        Conversation.objects.filter(owner_id=owner.user_id).update(updated=started)
    long_one = Conversation.objects.create(owner_id=owner.user_id, title="The long one", model="sim-small")
    parent = None
    with transaction.atomic():
        for i in range(messages):
            assistant = i % 2 == 1
            parent = Message.objects.create(
                conversation=long_one,
                parent=parent,
                role="assistant" if assistant else "user",
                content=f"{i}. {text}",
                status="completed",
                model="sim-small" if assistant else "",
                prompt_tokens=100 if assistant else 0,
                completion_tokens=80 if assistant else 0,
            )
    return long_one.pk


def query_counts(owner: Account, conversation_id: int) -> dict[str, int]:
    """How many SQL queries the sidebar and the conversation load make, counted in-process.

    The same views Daphne serves, called through Django's test client with the owner signed in.
    """
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from accounts.models import User

    client = Client()
    client.force_login(User.objects.get(pk=owner.user_id))
    counts = {}
    for name, url in (
        ("sidebar", "/chat/api/conversations"),
        ("conversation", f"/chat/api/conversations/{conversation_id}"),
    ):
        client.get(url)  # warm: first-request work is not what grows with the data
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        counts[name] = len(captured) if response.status_code == 200 else -response.status_code
    return counts


# -- answers in flight and their end ------------------------------------------------------------------


def in_flight() -> int:
    from django.db import connection

    from chat.models import Message

    try:
        return Message.objects.filter(status__in=["pending", "streaming"]).count()
    finally:
        connection.close()  # leave no connection open between looks


def wait_drained(timeout: float, stall: float = 5.0) -> tuple[bool, int]:
    """Wait until no answer is pending or streaming, or none has ended for ``stall`` seconds.

    (drained, how many are left). An answer whose runner crashed stays "streaming" until the
    reaper ends it, so waiting on it for the whole timeout would only waste the run's time.
    """
    deadline = time.monotonic() + timeout
    left = in_flight()
    last_change = time.monotonic()
    while left and time.monotonic() < deadline and time.monotonic() - last_change < stall:
        time.sleep(0.5)
        now_left = in_flight()
        if now_left != left:
            last_change = time.monotonic()
        left = now_left
    return left == 0, left


def wait_final(message_ids: list[int], timeout: float) -> int:
    """Wait until these answers are all in a final state; how many are not."""
    from django.db import connection

    from chat.models import Message

    deadline = time.monotonic() + timeout
    while True:
        left = Message.objects.filter(pk__in=message_ids, status__in=["pending", "streaming"]).count()
        connection.close()
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def reap_stalled() -> int:
    """What the reaper (a Celery beat task in production) does every 30 s: end answers whose runner died."""
    from asgiref.sync import async_to_sync

    from chat.generation.reap import reap_stalled as reap

    return len(async_to_sync(reap)())


def check_losses(accepted: list[dict]) -> dict:
    """For every accepted send: the user's message is stored as sent, the answer is final, one ledger row.

    ``accepted`` items carry ``user_message_id``, ``assistant_message_id``, ``conversation_id`` and ``content``.
    """
    from django.db.models import Count

    from billing.models import UsageRecord
    from chat.models import Message

    user_ids = [a["user_message_id"] for a in accepted]
    answer_ids = [a["assistant_message_id"] for a in accepted]
    stored = dict(Message.objects.filter(pk__in=user_ids).values_list("pk", "content"))
    missing_user = [a for a in accepted if a["user_message_id"] not in stored]
    changed_user = [
        a for a in accepted if a["user_message_id"] in stored and stored[a["user_message_id"]] != a["content"]
    ]
    statuses = dict(Message.objects.filter(pk__in=answer_ids).values_list("pk", "status"))
    by_status = Counter(statuses.get(i, "missing") for i in answer_ids)
    not_final = sum(n for status, n in by_status.items() if status not in FINAL_STATUSES)
    # Each accepted send started its own conversation, so its answer is the conversation's only one.
    conversation_ids = [a["conversation_id"] for a in accepted]
    ledger = dict(
        UsageRecord.objects.filter(conversation_id__in=conversation_ids)
        .values("conversation_id")
        .annotate(n=Count("pk"))
        .values_list("conversation_id", "n")
    )
    no_row = sum(1 for i in conversation_ids if ledger.get(i, 0) == 0)
    extra_rows = sum(n - 1 for n in ledger.values() if n > 1)
    lost = len(missing_user) + len(changed_user) + not_final + no_row + extra_rows
    return {
        "accepted": len(accepted),
        "user_messages_missing": len(missing_user),
        "user_messages_changed": len(changed_user),
        "answers_by_status": dict(by_status),
        "answers_not_final": not_final,
        "answers_without_ledger_row": no_row,
        "extra_ledger_rows": extra_rows,
        "lost": lost,
    }


def heartbeat_ttl() -> int:
    from django.conf import settings

    return settings.CHAT_HEARTBEAT_TTL_SECONDS


def admission_limits() -> dict[str, int]:
    from django.conf import settings

    return {"soft": settings.ADMISSION_SOFT_LIMIT, "hard": settings.ADMISSION_HARD_LIMIT}

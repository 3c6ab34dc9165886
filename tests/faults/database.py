"""Reaching into the test database from outside the product: hold a lock it will wait on, see which of
its connections wait, and cut them (pg_terminate_backend), as a failover or an administrator would.
Only the test database's own connections are ever touched; PostgreSQL itself is never restarted."""

from __future__ import annotations

import psycopg
from django.conf import settings


def connect(*, autocommit: bool = False) -> psycopg.Connection:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db.get("PASSWORD") or None,
        dbname=db["NAME"],
        autocommit=autocommit,
    )


def waiting_on_locks(admin: psycopg.Connection, query_contains: str = "") -> list[int]:
    """Backends of the test database (other than `admin`'s) blocked on a lock, running a query that
    contains `query_contains`."""
    rows = admin.execute(
        """
        SELECT pid FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
          AND wait_event_type = 'Lock' AND query ILIKE %s
        ORDER BY pid
        """,
        (f"%{query_contains}%",),
    ).fetchall()
    return [pid for (pid,) in rows]


def terminate(admin: psycopg.Connection, pids: list[int]) -> None:
    for pid in pids:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

"""Liveness and readiness, on the real Daphne.

`/healthz` says the process answers, and nothing else (no database or Redis work, no detail).
`/readyz` says whether it can serve: the database, Redis and at least one engine node up, each
reported as ok or not; what failed, and why, only to staff or a scraper holding METRICS_TOKEN.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from django.conf import settings

from harness.engines import free_port, start_simulator
from inference.health import poll_nodes
from tests.security.authz_world import build_world
from tests.security.live_matrix import cookies_for
from tests.support.servers import start_daphne
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "health-test-metrics-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def test_readiness_fails_while_redis_is_unreachable_and_only_the_token_reads_why():
    closed = free_port()  # nothing listens there
    server = start_daphne(
        engine_url="http://127.0.0.1:9",
        extra_env={"REDIS_URL": f"redis://127.0.0.1:{closed}/0", "METRICS_TOKEN": TOKEN},
    )
    try:
        alive = httpx.get(server.base_url + "/healthz", timeout=30)
        assert alive.status_code == 200 and alive.json() == {"status": "ok"}

        ready = httpx.get(server.base_url + "/readyz", timeout=30)
        assert ready.status_code == 503, ready.text
        assert ready.json() == {
            "status": "unavailable",
            "checks": {"database": "ok", "redis": "failing", "engines": "not checked"},
        }
        assert str(closed) not in ready.text and "127.0.0.1" not in ready.text

        told = httpx.get(server.base_url + "/readyz", headers=BEARER, timeout=30)
        assert told.status_code == 503
        assert str(closed) in told.json()["details"]["redis"]
    finally:
        server.stop()


def test_readiness_is_ok_with_the_database_redis_and_an_engine_up_and_fails_without_an_engine(settings):
    engine = start_simulator("--accept-any-model")
    server = start_daphne(engine_url=engine.url)
    world = build_world()
    staff = httpx.Client(base_url=server.base_url, cookies=cookies_for(world, "staff"), timeout=30)
    owner = httpx.Client(base_url=server.base_url, cookies=cookies_for(world, "owner"), timeout=30)
    try:
        # The poller (Celery beat's job in production) has read the one engine's health and load.
        settings.SGLANG_URL = engine.url
        assert poll_nodes() == 1
        ready = wait_until(
            lambda: (r := httpx.get(server.base_url + "/readyz", timeout=30)).status_code == 200 and r,
            what="readiness with the engine up",
        )
        assert ready.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok", "engines": "ok"}}
        assert "default" in staff.get("/readyz").json()["details"]["engines"]  # the node's name, for staff
        assert "details" not in owner.get("/readyz").json()  # not for other users

        engine.stop()
        for _ in range(settings.INFERENCE_DOWN_AFTER):  # judged down as any node is, after this many
            assert poll_nodes() == 0
        down = wait_until(
            lambda: (r := httpx.get(server.base_url + "/readyz", timeout=30)).status_code == 503 and r,
            what="readiness without an engine",
        )
        assert down.json()["checks"] == {"database": "ok", "redis": "ok", "engines": "failing"}
        assert "default" not in down.text
        assert "default" in staff.get("/readyz").json()["details"]["engines"]
    finally:
        staff.close()
        owner.close()
        server.stop()
        engine.stop()


def test_no_anonymous_health_body_names_the_database_host_port_or_role():
    """Without the pool, a database the product cannot sign in to fails with psycopg's message, which
    names the host, port and role; that message is for staff and the token only."""
    db = settings.DATABASES["default"]
    host, port = db["HOST"] or "127.0.0.1", str(db["PORT"] or 5432)
    role = f"sglchat_nobody_{uuid.uuid4().hex[:8]}"  # no such role
    server = start_daphne(
        engine_url="http://127.0.0.1:9",
        database=f"postgres://{role}@{host}:{port}/{db['NAME']}",
        require_database=False,
        extra_env={"DATABASE_POOL": "false", "METRICS_TOKEN": TOKEN},
    )
    try:
        for path in ("/healthz", "/readyz"):
            response = httpx.get(server.base_url + path, timeout=30)
            for secret in (role, host, port):
                assert secret not in response.text, (path, secret, response.text)
        ready = httpx.get(server.base_url + "/readyz", timeout=30)
        assert ready.status_code == 503
        assert ready.json()["checks"]["database"] == "failing"
        told = httpx.get(server.base_url + "/readyz", headers=BEARER, timeout=30)
        assert role in told.json()["details"]["database"]
    finally:
        server.stop()

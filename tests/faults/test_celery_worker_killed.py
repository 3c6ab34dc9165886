"""A Celery worker is killed (SIGKILL) while it processes a Stripe webhook: the event is already stored,
so nothing the webhook said is lost; Celery beat's sweep (billing.tasks.retry_provider_events) has a
new worker process it, once."""

import json
import sys
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from billing.models import ProviderEvent, Subscription
from billing.selectors import effective_plan
from config.celery import app as celery_app
from harness.engines import ManagedProcess
from tests.billing.stripe_payloads import PRICES, WEBHOOK_SECRET, event, sign, subscription
from tests.billing.stripe_standin import StripeStandIn
from tests.faults import database
from tests.faults.invariants import assert_invariants
from tests.support.plans import put_on_plan
from tests.support.servers import database_url
from tests.support.waiting import wait_until


@pytest.fixture
def stripe_env(settings):
    standin = StripeStandIn().start()
    env = {
        "PAYMENT_PROVIDER": "stripe",
        "STRIPE_SECRET_KEY": "sk_test_standin",
        "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "STRIPE_API_BASE": standin.url,
        **{f"STRIPE_PRICE_{slug.upper()}": price for slug, price in PRICES.items()},
        # Tasks go through the broker (this test's Redis database) to a real worker, not inline.
        "CELERY_TASK_ALWAYS_EAGER": "false",
    }
    settings.PAYMENT_PROVIDER = "stripe"
    settings.STRIPE_PRICES = dict(PRICES)
    yield env
    standin.stop()


def start_worker(env: dict, name: str) -> ManagedProcess:
    """`celery -A config worker`, one process (solo pool), on the test database and broker."""
    argv = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo", "-n", f"{name}@%h"]
    worker = ManagedProcess(
        "celery-worker",
        [*argv, "--loglevel", "info", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        "",
        env={"DJANGO_PROFILE": "test", "DATABASE_URL": database_url(), **env},
    )
    worker.wait_until(lambda: " ready." in worker.log(), timeout=60, what="ready")
    return worker


# send_task always goes through the broker, which is the point here (Celery warns that eager mode is bypassed).
@pytest.mark.filterwarnings("ignore::celery.exceptions.AlwaysEagerIgnored")
def test_a_worker_killed_mid_webhook_leaves_the_stored_event_to_be_processed_on_retry(
    stack, user, accepted, stripe_env
):
    put_on_plan(user, "free")
    now = int(timezone.now().timestamp())
    payload = json.dumps(
        event(
            "evt_killed_worker",
            "customer.subscription.created",
            now,
            subscription(
                "sub_killed",
                customer="cus_k",
                plan="plus",
                status="active",
                start=now,
                end=now + 30 * 86400,
                user_id=user.pk,
            ),
        )
    )
    engine = stack.engine()
    server = stack.server(engine.url, **stripe_env)
    worker = start_worker(stripe_env, "doomed")
    stack.processes.append(worker)

    holder = database.connect()
    admin = database.connect(autocommit=True)
    try:
        # Subscriptions locked: the worker will stop inside its processing, mid-transaction.
        holder.execute("LOCK TABLE billing_subscription IN ACCESS EXCLUSIVE MODE")
        response = httpx.post(
            f"{server.base_url}/billing/stripe/webhook/",
            content=payload,
            headers={"Stripe-Signature": sign(payload), "Content-Type": "application/json"},
            timeout=30,
        )
        assert response.status_code == 200 and response.json() == {"received": True, "handled": True}
        wait_until(
            lambda: database.waiting_on_locks(admin, "billing_subscription"),
            timeout=60,
            what="the worker to be processing the event",
        )
        worker.kill()
    finally:
        holder.rollback()
        holder.close()
        admin.close()

    stored = ProviderEvent.objects.get(event_id="evt_killed_worker")
    assert stored.processed_at is None  # the killed worker committed nothing
    assert effective_plan(user).slug == "free"

    # A worker starts again; Celery beat's sweep runs (a minute on: events younger than that are left to
    # their own task, so the row is aged rather than the test waiting a minute).
    stack.processes.append(start_worker(stripe_env, "successor"))
    ProviderEvent.objects.filter(pk=stored.pk).update(received_at=timezone.now() - timedelta(minutes=2))
    celery_app.send_task("billing.tasks.retry_provider_events")
    wait_until(
        lambda: ProviderEvent.objects.get(pk=stored.pk).processed_at is not None,
        timeout=60,
        what="the sweep to process the stored event",
    )
    assert Subscription.objects.filter(provider_subscription_id="sub_killed").count() == 1
    assert effective_plan(user).slug == "plus"
    assert_invariants([user], accepted)

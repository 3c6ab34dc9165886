"""Celery tasks: webhook processing and the beat jobs (schedule in config/settings.py, Billing section)."""

from celery import shared_task

from billing.services import quota, stripe_events, subscriptions

# Webhook processing is queued by the service that stores the events, so it is defined there (the task
# name is still billing.tasks.process_provider_event).
process_provider_event = stripe_events.process_provider_event


@shared_task(name="billing.tasks.retry_provider_events")
def retry_provider_events() -> int:
    """Events whose processing failed (or whose task was lost) get another go."""
    return stripe_events.retry_unprocessed()


@shared_task(name="billing.tasks.roll_over_periods")
def roll_over_periods() -> dict:
    report = subscriptions.roll_over_periods()
    return {"examined": report.examined, "changed": report.changed}


@shared_task(name="billing.tasks.end_past_due_after_grace")
def end_past_due_after_grace() -> dict:
    report = subscriptions.end_past_due_after_grace()
    return {"examined": report.examined, "ended": report.changed}


@shared_task(name="billing.tasks.reconcile_usage_counters")
def reconcile_usage_counters() -> dict:
    """Nightly: rebuild the Redis counters from the ledger; drift is logged and stored (admin: reconciliations)."""
    report = quota.reconcile_counters()
    return {
        "checked": report.checked,
        "rebuilt": report.rebuilt,
        "drifted": report.drifted,
        "drift_tokens": report.drift_tokens,
        "details": report.details,
    }

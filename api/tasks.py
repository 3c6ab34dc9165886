"""Celery beat jobs of the API (schedule in config/settings.py, API section)."""

from celery import shared_task

from api import services


@shared_task(name="api.tasks.purge_expired_responses")
def purge_expired_responses() -> int:
    """Nightly: stored responses past their retention are deleted."""
    return services.purge_expired_responses()

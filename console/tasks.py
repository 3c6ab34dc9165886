"""Background work for the staff console, on Celery."""

from celery import shared_task

from console import service_load


@shared_task(ignore_result=True)
def record_service_load() -> None:
    """Keep this minute's peak load (generations in flight, each node's queue) for the dashboard."""
    service_load.record()

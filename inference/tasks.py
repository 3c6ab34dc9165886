from celery import shared_task

from inference.health import poll_nodes as poll


@shared_task(name="inference.tasks.poll_nodes", ignore_result=True)
def poll_nodes() -> int:
    """Every node's health and load (Celery beat, every INFERENCE_POLL_SECONDS)."""
    return poll()

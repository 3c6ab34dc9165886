"""Evaluations on Celery: a run is one job, item by item (evals.runner)."""

from celery import shared_task

from evals.runner import execute_run


@shared_task(ignore_result=True, acks_late=True)
def run_evaluation(run_id: int) -> None:
    execute_run(run_id)

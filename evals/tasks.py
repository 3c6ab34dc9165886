"""Evaluations and rollouts on Celery: a run is one job, item by item (evals.runner.run_evaluation, named
here so that Celery finds it); the running rollouts are checked on the beat (evals.rollouts)."""

import logging

from celery import shared_task

from evals.rollouts import check_rollouts
from evals.runner import run_evaluation

__all__ = ["advance_rollouts", "run_evaluation"]

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def advance_rollouts() -> None:
    """Judge the due step of every running rollout (Celery beat, every ROLLOUT_CHECK_SECONDS)."""
    for rollout_id, done in check_rollouts().items():
        if done != "watching":
            log.info("rollout %s: %s", rollout_id, done)

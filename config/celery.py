"""The Celery application. Tasks live in each app's tasks.py and are found automatically."""

import os

from celery import Celery
from celery.signals import beat_init, worker_init, worker_process_init, worker_process_shutdown

from config import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("sglchat")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
@beat_init.connect
def _trace(**_kwargs) -> None:
    """Spans from each worker process, set up after the fork (an exporter's thread does not survive it),
    and from beat; nothing when tracing is off (config/tracing.py)."""
    tracing.set_up("sglchat-worker")


@worker_init.connect
def _trace_unforked(sender=None, **_kwargs) -> None:
    """A worker whose pool does not fork (solo, threads) runs its tasks in this process; a forking one
    imports what its children need before the fork, so that they start quickly."""
    if getattr(getattr(sender, "pool_cls", None), "__module__", "").endswith(".prefork"):
        tracing.preload()
    else:
        tracing.set_up("sglchat-worker")


@worker_process_shutdown.connect
def _flush_spans(**_kwargs) -> None:
    """A pool's child leaves through os._exit, where no exit handler would send its last spans."""
    tracing.shut_down()

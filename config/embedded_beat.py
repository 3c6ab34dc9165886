"""Celery beat's schedule, run inside the Daphne process of the embedded default (EMBEDDED_BEAT).

Without Redis there is no beat and no worker, and the state the periodic jobs look at lives in the
memory of the one Daphne process: heartbeats and token streams (chat.generation.streams.LocalStreams), quota
counters (billing.quota_store.LocalQuotaStore), the cache. A beat in another process would see no
heartbeat and reap every live answer, so the schedule runs here, on Daphne's event loop:

- CELERY_BEAT_SCHEDULE is read as Celery beat reads it (celery.beat.ScheduleEntry: the same
  intervals and crontabs, the same "first run one interval after start");
- each due job calls the same task function a Celery worker would, in a worker thread (these
  functions are synchronous and use the database); from there `async_to_sync` (the reaper task)
  runs its coroutine back on Daphne's loop, where the in-memory streams live;
- a job that fails is logged and takes its next turn; it neither stops nor delays the others, and
  a job still running when its next turn comes is not started twice.

It starts with the first connection Daphne serves (Daphne has no start-up hook), once per process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Executor, Future

from asgiref.sync import sync_to_async
from celery import Celery
from celery.beat import DEFAULT_MAX_INTERVAL, ScheduleEntry
from django.conf import settings
from django.db import connections

from config.celery import app as celery_app

log = logging.getLogger(__name__)
# Never spin, even if a schedule reports "check again in 0 s".
MIN_SLEEP_SECONDS = 0.05


class _DaemonThreads(Executor):
    """One daemon thread per job run.

    A pooled (non-daemon) thread blocked in `async_to_sync` when Daphne's loop stops would keep the
    process from exiting at Ctrl-C; a daemon thread cannot. A run every few seconds needs no pool.
    """

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=run, name="embedded-beat-job", daemon=True).start()
        return future


_threads = _DaemonThreads()


def _call_task(app: Celery, name: str, args: tuple, kwargs: dict) -> object:
    """Run one task's function in this (new) thread, as a worker would; its database connections end with it."""
    try:
        return app.tasks[name](*args, **kwargs)
    finally:
        connections.close_all()


async def _run_job(entry: ScheduleEntry) -> None:
    try:
        await sync_to_async(_call_task, thread_sensitive=False, executor=_threads)(
            entry.app, entry.task, tuple(entry.args or ()), dict(entry.kwargs or {})
        )
    except Exception:
        log.exception("periodic job %s (%s) failed; it runs again at its next turn", entry.name, entry.task)
    else:
        log.debug("periodic job %s (%s) ran", entry.name, entry.task)


async def run_schedule(schedule: dict | None = None, *, app: Celery = celery_app) -> None:
    """Run `schedule` (by default CELERY_BEAT_SCHEDULE) on this event loop until cancelled."""
    schedule = settings.CELERY_BEAT_SCHEDULE if schedule is None else schedule
    # Register every app's tasks (each installed app's tasks.py). Not the worker's start-up hook
    # (loader.import_default_modules): through Celery's Django fix-up that sets Django up again.
    await sync_to_async(app.autodiscover_tasks, thread_sensitive=False, executor=_threads)(force=True)
    entries = {name: ScheduleEntry(name=name, app=app, **fields) for name, fields in schedule.items()}
    running: dict[str, asyncio.Task] = {}
    max_sleep = app.conf.beat_max_loop_interval or DEFAULT_MAX_INTERVAL
    while True:
        sleep = max_sleep
        for name, entry in list(entries.items()):
            try:
                due, next_check = entry.is_due()
            except Exception:
                log.exception("periodic job %s: its schedule could not be read", name)
                continue
            if due:
                entries[name] = entry = next(entry)  # last run: now, as beat records it
                if name in running and not running[name].done():
                    log.warning("periodic job %s is still running from its last turn; this turn is skipped", name)
                else:
                    running[name] = asyncio.create_task(_run_job(entry), name=f"embedded-beat:{name}")
            sleep = min(sleep, next_check)
        await asyncio.sleep(max(sleep, MIN_SLEEP_SECONDS))


_schedule_task: asyncio.Task | None = None


def _ended(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the in-process beat schedule stopped", exc_info=task.exception())


def start() -> None:
    """Start running the beat schedule on the running event loop; only the first call in a process does."""
    global _schedule_task
    if _schedule_task is not None:
        return
    _schedule_task = asyncio.get_running_loop().create_task(run_schedule(), name="embedded-beat")
    _schedule_task.add_done_callback(_ended)
    log.info(
        "EMBEDDED_BEAT: running Celery beat's schedule in this process: %s", ", ".join(settings.CELERY_BEAT_SCHEDULE)
    )


class RunBeatSchedule:
    """ASGI wrapper: starts the beat schedule on the server's event loop at the first connection."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        start()
        return await self.application(scope, receive, send)

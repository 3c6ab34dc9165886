"""Where ingestion runs: the one place that decides.

With a Celery worker (CELERY_TASK_ALWAYS_EAGER off: production, `make up`), a task on the queue. When
tasks run eagerly (the embedded default without Redis, and the test profile, live servers included), an
eager task would read the whole file inside the upload request, and a cancel could not arrive while
it runs; so a small pool of threads in the process reads files instead (DOCUMENTS_INGEST_THREADS),
the request returns at once, and the page polls the document's progress as it would with Celery.
A file the process was reading when it stopped is left in progress; documents.ingestion's states
show it, and deleting or cancelling it works as for any other.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings
from django.db import close_old_connections, connections

from documents import ingestion
from documents.tasks import ingest_document

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _threads() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max(1, settings.DOCUMENTS_INGEST_THREADS), thread_name_prefix="ingest")
        return _pool


def _in_thread(document_id: int) -> None:
    close_old_connections()
    try:
        ingestion.ingest(document_id)
    finally:
        connections.close_all()  # this thread's only: the pool's threads outlive the job


def start_ingestion(document_id: int) -> Future | None:
    """Read document `document_id` in the background (call after its row is committed). Returns the
    thread's Future when it runs in the process (tests may wait on it), None when it is queued."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return _threads().submit(_in_thread, document_id)
    ingest_document.delay(document_id)
    return None

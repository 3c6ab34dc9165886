"""Daphne's Django keeps its request threads (config.loop_handler.RequestThreads): a request's sync work
runs on a thread kept from an earlier request, not on one made (and joined by another) for it alone."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.signals import request_started

from config.loop_handler import LoopHandler, RequestThreads

pytestmark = pytest.mark.django_db(transaction=True)


def _scope(path: str) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost")],
        "client": ("127.0.0.1", 5000),
        "server": ("localhost", 80),
    }


async def _get(handler: LoopHandler, path: str) -> int:
    communicator = ApplicationCommunicator(handler, _scope(path))
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(10)
    while (await communicator.receive_output(10)).get("more_body"):
        pass
    await communicator.wait(10)
    return start["status"]


def test_one_request_after_another_runs_its_sync_work_on_the_same_kept_thread(settings):
    settings.ALLOWED_HOSTS = ["localhost"]
    threads: list[int] = []

    def seen(**kwargs) -> None:  # a sync receiver: Django runs it on the request's thread
        threads.append(threading.get_native_id())

    request_started.connect(seen)
    handler = LoopHandler()
    handler.threads = RequestThreads()
    try:

        async def five() -> list[int]:
            return [await _get(handler, "/healthz") for _ in range(5)]

        statuses = asyncio.run(five())
    finally:
        request_started.disconnect(seen)
        handler.threads.close()

    assert statuses == [200] * 5
    assert len(threads) == 5 and len(set(threads)) == 1, threads
    assert threads[0] != threading.get_native_id()  # a thread of the handler's, not the test's


def test_a_request_cancelled_during_its_sync_work_does_not_lend_its_busy_thread_to_the_next(settings):
    """Daphne cancels a request its client left once it outlasts the close timeout; its thread may still
    be running the request's sync work. The next request must not queue behind that work."""
    settings.ALLOWED_HOSTS = ["localhost"]
    started, release = threading.Event(), threading.Event()
    busy: list[int] = []
    threads: list[int] = []

    def slow(**kwargs) -> None:
        busy.append(threading.get_native_id())
        started.set()
        release.wait(30)

    def seen(**kwargs) -> None:
        threads.append(threading.get_native_id())

    handler = LoopHandler()
    handler.threads = RequestThreads()

    async def cancelled_then_another() -> int:
        request_started.connect(slow)
        communicator = ApplicationCommunicator(handler, _scope("/healthz"))
        await communicator.send_input({"type": "http.request", "body": b""})
        await asyncio.to_thread(started.wait, 10)
        request_started.disconnect(slow)
        communicator.future.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await communicator.future
        request_started.connect(seen)
        try:
            return await _get(handler, "/healthz")  # answered while the first's work still runs
        finally:
            request_started.disconnect(seen)

    try:
        status = asyncio.run(cancelled_then_another())
    finally:
        release.set()
        request_started.disconnect(slow)
        handler.threads.close()

    assert status == 200
    assert threads and busy and threads[0] != busy[0]

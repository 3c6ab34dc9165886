"""The generation runner: one asyncio task per answer, in the ASGI server process.

It is detached from every connection: closing the tab does not stop it (the answer is there on
reload); only a stop command does. It streams from the engine, coalesces tokens into frames on the
message's token stream, beats a heartbeat, and at the end writes the final text, token counts, time
to first token and status, and settles the quota and the ledger exactly once.

Stop commands reach it on any process: `chat.generation.stop` sets a flag and broadcasts; the
per-process listener here cancels the local task, which aborts the engine request (the inference
client turns a cancelled stream into an abort on the engine) and saves what was written so far.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time

from asgiref.sync import sync_to_async
from django.conf import settings

from chat import engine, finish
from chat.streams import DELTA, get_streams, heartbeat_ttl
from inference.errors import EngineError

log = logging.getLogger(__name__)


# message id -> task, for the generations running in this process.
_running: dict[int, asyncio.Task] = {}
# Per generation here: set when the user asks it to stop.
_stop_events: dict[int, asyncio.Event] = {}
_stop_listener: asyncio.Task | None = None


def launch(message_id: int, reservation) -> asyncio.Task:
    """Start generating `message_id` in the background of this process's event loop."""
    _ensure_stop_listener()
    _stop_events[message_id] = asyncio.Event()
    # A fresh context: the runner outlives the request, and must not inherit the request's
    # thread executor (asgiref's sync_to_async would submit to it after it has shut down).
    task = asyncio.get_running_loop().create_task(
        run(message_id, reservation), name=f"generation-{message_id}", context=contextvars.Context()
    )
    _running[message_id] = task

    def forget(_task: asyncio.Task) -> None:
        _running.pop(message_id, None)
        _stop_events.pop(message_id, None)

    task.add_done_callback(forget)
    return task


def running_here() -> list[int]:
    return list(_running)


def _ensure_stop_listener() -> None:
    global _stop_listener
    if _stop_listener is None or _stop_listener.done():
        _stop_listener = asyncio.get_running_loop().create_task(
            _listen_for_stops(), name="stop-listener", context=contextvars.Context()
        )


async def _listen_for_stops() -> None:
    async for message_id in get_streams().stop_commands():
        cancel_local(message_id)


def cancel_local(message_id: int) -> bool:
    """Stop a generation if it runs in this process: the engine is told to abort, and the runner
    saves what was written (with the engine's own token counts) as `stopped`."""
    stop = _stop_events.get(message_id)
    if stop is None:
        return False
    stop.set()
    return True


class _Frames:
    """Coalesces deltas: a frame goes out every CHAT_FRAME_INTERVAL_MS or CHAT_FRAME_TOKENS tokens."""

    def __init__(self, message_id: int):
        self.message_id = message_id
        self.pending: list[str] = []
        self.pending_tokens = 0
        self.last_flush = time.monotonic()
        self.text_parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.text_parts) + "".join(self.pending)

    def add(self, text: str) -> None:
        self.pending.append(text)
        self.pending_tokens += 1

    def due(self) -> bool:
        waited_ms = (time.monotonic() - self.last_flush) * 1000
        return bool(self.pending) and (
            waited_ms >= settings.CHAT_FRAME_INTERVAL_MS or self.pending_tokens >= settings.CHAT_FRAME_TOKENS
        )

    async def flush(self) -> None:
        if not self.pending:
            return
        chunk = "".join(self.pending)
        self.pending.clear()
        self.pending_tokens = 0
        self.last_flush = time.monotonic()
        self.text_parts.append(chunk)
        await get_streams().append(self.message_id, DELTA, {"text": chunk})


async def _beat(message_id: int, frames: _Frames) -> None:
    """Say "alive" and checkpoint the text so far, so a runner that dies loses little."""
    streams = get_streams()
    saved = ""
    while True:
        await streams.beat(message_id)
        text = "".join(frames.text_parts)
        if text != saved:
            await sync_to_async(finish.checkpoint)(message_id, text)
            saved = text
        await asyncio.sleep(heartbeat_ttl() / 3)


async def run(message_id: int, reservation) -> None:
    streams = get_streams()
    stop = _stop_events.setdefault(message_id, asyncio.Event())
    started = time.monotonic()
    frames = _Frames(message_id)
    outcome = finish.Outcome()
    beat = asyncio.get_running_loop().create_task(_beat(message_id, frames))
    try:
        job = await sync_to_async(engine.prepare)(message_id)
        if job is None:  # deleted before it started
            outcome.status = "gone"
            return
        outcome.prompt_estimate = job.prompt_estimate
        await finish.announce(job.user_id, job.conversation_id, message_id, active=True)
        await sync_to_async(finish.mark_streaming)(message_id, job.node)
        if await streams.stop_requested(message_id):
            stop.set()
        async for event in engine.stream(job, stop):
            if event.text:
                if outcome.ttft_ms is None:
                    outcome.ttft_ms = int((time.monotonic() - started) * 1000)
                frames.add(event.text)
                if frames.due():
                    await frames.flush()
            if event.usage is not None:
                outcome.usage = event.usage
            if event.finish_reason:
                outcome.finish_reason = event.finish_reason
        outcome.status = "stopped" if stop.is_set() else "completed"
    except asyncio.CancelledError:
        # Not a user's stop (that ends the stream normally) but the server going away: leave the
        # message as it is, for the reaper to find by its silent heartbeat.
        beat.cancel()
        raise
    except EngineError as exc:
        log.warning("generation %s failed: %s", message_id, exc, extra={"message_id": message_id})
        outcome.status = "failed"
        outcome.error = exc.user_message
    except Exception:
        log.exception("generation %s crashed", message_id, extra={"message_id": message_id})
        outcome.status = "failed"
        outcome.error = "Something went wrong while writing this answer. Try regenerating it."
    finally:
        beat.cancel()
        if outcome.status:
            await frames.flush()
            await finish.complete(message_id, reservation, frames.text, outcome)

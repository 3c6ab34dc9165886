"""The generation runner: one asyncio task per answer, in the ASGI server process.

It is detached from every connection: closing the tab does not stop it (the answer is there on
reload); only a stop command does. It streams from the engine, coalesces tokens into frames on the
message's token stream, beats a heartbeat (which also renews its admission lease), and at the end
settles: the final text, token counts, time to first token and status, the quota and the ledger,
exactly once.

The runner writes to the database as little as correctness allows: it marks the answer streaming
(while the engine works on the first token, off the path of that token), writes the end once (the
final state with its ledger row, in one transaction), and, only for an answer still running after
a heartbeat interval, checkpoints its text with each heartbeat, so the reaper can keep what it
wrote if this process dies.

Stop commands reach it on any process: `chat.generation.stop` sets a flag and broadcasts; the
per-process listener here sets the local generation's stop event, which aborts the engine request
(the inference client turns it into an abort on the engine); the runner then saves what was
written so far as `stopped`. The runner reads the flag when it starts (a stop sent before), and the
listener reads the flags of this process's generations whenever it subscribes, first or again after
a lost Redis connection (a stop broadcast while it was not subscribed reached no one here).

When the engines are busy before the first token (every node said 503, or none can take it), the
answer is not failed: readers get a "busy" frame with the wait, the runner waits (free plans back off
exponentially, paid ones linearly, as the page does for a refused send) and routes the request again,
until CHAT_BUSY_RETRY_SECONDS have passed. After the first token nothing is retried.

Moderation screens the answer as it streams (`moderation.services.OutputScreen`): every
MODERATION_WINDOW_CHARS characters and once at the end. A window that blocks sets the same stop
event (the engine request is aborted), nothing more is sent to readers, and the answer is saved as
`blocked` with no text; the cut text is kept only on the staff's flag.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DatabaseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from chat.generation import admission, engine, settle
from chat.generation.start import Turn
from chat.generation.streams import BUSY, DELTA, StreamLost, get_streams, heartbeat_ttl
from chat.models import Message
from chat.tasks import after_answer, summarize_conversation
from config import metrics
from inference.errors import EngineError, EngineOverloaded
from inference.routing import NoNodeAvailable
from moderation.services import OutputScreen

log = logging.getLogger(__name__)


# message id -> task, for the generations running in this process.
_running: dict[int, asyncio.Task] = {}
# Per generation here: set when the user asks it to stop.
_stop_events: dict[int, asyncio.Event] = {}
_stop_listener: asyncio.Task | None = None


def launch(turn: Turn) -> asyncio.Task:
    """Start generating `turn`'s answer in the background of this process's event loop."""
    message_id = turn.assistant_message.pk
    _ensure_stop_listener()
    _stop_events[message_id] = asyncio.Event()
    get_streams().producing(message_id)
    # A fresh context: the runner outlives the request, and must not inherit the request's
    # thread executor (asgiref's sync_to_async would submit to it after it has shut down).
    task = asyncio.get_running_loop().create_task(
        run(turn), name=f"generation-{message_id}", context=contextvars.Context()
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
    """This process's listener for stop commands, for as long as the process runs (the streams keep
    it subscribed through a lost Redis connection). A broadcast reaches only the listeners subscribed
    when it is sent, so each time the listener subscribes (the first time, which runners started
    meanwhile do not wait for, and again after losing Redis), it first stops the generations here
    whose stop was flagged while it was not listening."""
    async for message_id in get_streams().stop_commands(on_listening=_stop_those_flagged):
        cancel_local(message_id)


async def _stop_those_flagged() -> None:
    streams = get_streams()
    for message_id, stop in list(_stop_events.items()):
        if not stop.is_set() and await streams.stop_requested(message_id):
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
        #: (frame id, text) of every delta on the stream: what it is rebuilt from if Redis loses it.
        self.sent: list[tuple[str, str]] = []

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

    def take(self) -> str:
        """The pending text as one chunk (counted as sent)."""
        chunk = "".join(self.pending)
        self.pending.clear()
        self.pending_tokens = 0
        self.last_flush = time.monotonic()
        if chunk:
            self.text_parts.append(chunk)
        return chunk

    async def flush(self) -> None:
        chunk = self.take()
        if not chunk:
            return
        try:
            frame_id = await self._append(chunk)
        except RedisConnectionError:
            # Never sent (no free connection, or none could be made: a saturated process or a Redis
            # hiccup). The text goes out with the next frame, or with the last one; the answer goes on.
            self.text_parts.pop()
            self.pending.insert(0, chunk)
            log.warning("frame of message %s not sent; kept for the next one", self.message_id)
            return
        self.sent.append((frame_id, chunk))

    async def _append(self, chunk: str) -> str:
        streams = get_streams()
        try:
            return await streams.append(self.message_id, DELTA, {"text": chunk}, continuing=bool(self.sent))
        except StreamLost:
            log.warning("token stream of message %s lost (Redis lost its data); rebuilding it", self.message_id)
            await streams.restore(self.message_id, self.sent)
            return await streams.append(self.message_id, DELTA, {"text": chunk}, continuing=True)


async def _beat(turn: Turn, frames: _Frames) -> None:
    """Every third of the heartbeat's lifetime: say "alive", look at the stop flag, renew the admission
    lease, and keep the text so far, so a runner that dies loses little.

    The flag is read here because the stop broadcast can be missed (the listener was subscribing
    again after losing Redis): a stop sent through another process is then honoured at the next beat."""
    streams = get_streams()
    message_id = turn.assistant_message.pk
    interval = heartbeat_ttl() / 3
    saved = None
    while True:
        await asyncio.sleep(interval)
        try:
            await streams.beat(message_id)
            if await streams.stop_requested(message_id):
                cancel_local(message_id)
            await admission.renew([turn.job.rid])
            text = "".join(frames.text_parts)
            if text != saved:
                await database_sync_to_async(settle.checkpoint)(message_id, text)
                saved = text
        except (DatabaseError, RedisError):
            # A passing failure must not stop the heartbeat for good; the next beat tries again.
            log.warning("heartbeat of message %s failed", message_id, exc_info=True)


async def _mark_streaming(message_id: int, node: str) -> None:
    """A label, not the answer: if the database cannot take it now, the answer goes on (its end is
    written with retries, and the reaper's rule does not depend on it)."""
    try:
        await database_sync_to_async(settle.mark_streaming)(message_id, node)
    except DatabaseError:
        log.warning("could not mark message %s streaming", message_id, exc_info=True)


async def run(turn: Turn) -> None:
    message_id = turn.assistant_message.pk
    streams = get_streams()
    stop = _stop_events.setdefault(message_id, asyncio.Event())
    started = time.monotonic()
    frames = _Frames(message_id)
    outcome = settle.Outcome(prompt_estimate=turn.job.prompt_estimate)
    marking: asyncio.Task | None = None
    screen = OutputScreen()
    produced = 0
    beat = asyncio.get_running_loop().create_task(_beat(turn, frames))
    metrics.IN_FLIGHT.labels("chat").inc()
    try:
        # Marked streaming while the engine works on the first token; readers see no frame before it is.
        marking = asyncio.get_running_loop().create_task(_mark_streaming(message_id, turn.job.node))
        await settle.announce_quietly(turn.context.user.pk, turn.conversation.pk, message_id, active=True)
        # If Redis cannot say now, go on: later stops still arrive as commands (stop_commands); only one
        # sent in the instant before this check would be missed, and the user can press Stop again.
        with contextlib.suppress(RedisError):
            if await streams.stop_requested(message_id):
                stop.set()
        attempt = 0
        give_up = time.monotonic() + settings.CHAT_BUSY_RETRY_SECONDS
        while True:
            try:
                async for event in engine.stream(turn.job, stop):
                    if event.text and screen.verdict is None:  # after a cut, the rest never reaches anyone
                        if outcome.ttft_ms is None:
                            outcome.ttft_ms = int((time.monotonic() - started) * 1000)
                        frames.add(event.text)
                        produced += len(event.text)
                        if screen.due(produced) and await screen.check(frames.text) is not None:
                            stop.set()  # the engine request is aborted; its stream ends with its token counts
                            continue
                        if frames.due():
                            if marking is not None:
                                await marking
                                marking = None
                            await frames.flush()
                    if event.usage is not None:
                        outcome.usage = event.usage
                    if event.finish_reason:
                        outcome.finish_reason = event.finish_reason
                break
            except (EngineOverloaded, NoNodeAvailable) as busy:
                if outcome.ttft_ms is not None or stop.is_set() or time.monotonic() >= give_up:
                    raise
                if not await _wait_while_busy(turn, busy, attempt, stop):
                    break  # stopped while waiting: saved as stopped, with nothing written
                attempt += 1
        if screen.verdict is None and not stop.is_set():
            await screen.check(frames.text)  # the last window
        if screen.verdict is not None:
            outcome.status, outcome.error = Message.Status.BLOCKED, screen.verdict.reason
        else:
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
    except NoNodeAvailable as refusal:
        outcome.status = "failed"
        outcome.error = f"{refusal.message.split('.')[0]}. Try regenerating this answer in a little while."
    except Exception:
        log.exception("generation %s crashed", message_id, extra={"message_id": message_id})
        outcome.status = "failed"
        outcome.error = "Something went wrong while writing this answer. Try regenerating it."
    finally:
        beat.cancel()
        metrics.IN_FLIGHT.labels("chat").dec()
        if marking is not None:
            await asyncio.gather(marking, return_exceptions=True)  # before the final write, never after it
        if outcome.status:
            last_chunk = frames.take()
            if outcome.status == Message.Status.BLOCKED:
                last_chunk = ""  # what was not sent yet never is
            answer = turn.assistant_message
            if await settle.complete(
                answer,
                turn.reservation,
                frames.text,
                outcome,
                owner_id=turn.context.user.pk,
                user=turn.context.user,
                node=turn.job.node,
                last_chunk=last_chunk,
                period=turn.context.billing,
                sent=frames.sent,
            ):
                await _follow_up(turn)
            await _record_flags(screen, turn, frames.text)


def busy_delay(attempt: int, retry_after: float | None, priority: str) -> float:
    """Seconds before busy retry `attempt` (0-based), the rule the page uses for a refused send: the
    engine's Retry-After is the base; free requests back off exponentially (they are shed first, so
    hammering helps nobody), premium ones linearly (they are admitted first)."""
    base = max(1.0, retry_after or 2.0)
    if priority == admission.PREMIUM:
        return min(base * (attempt + 1), 30.0)
    return min(base * 2**attempt, 60.0)


async def _wait_while_busy(turn: Turn, busy: Exception, attempt: int, stop: asyncio.Event) -> bool:
    """Tell the readers, wait, and route the request again. False when the user stopped meanwhile."""
    retry_after = getattr(busy, "retry_after", None)
    delay = busy_delay(attempt, retry_after, turn.context.priority)
    message_id = turn.assistant_message.pk
    log.info("generation %s: engines busy (%s); retrying in %.0f s", message_id, busy, delay)
    with contextlib.suppress(RedisError):
        await get_streams().append(
            message_id,
            BUSY,
            {
                "retry_after": round(delay),
                "message": "The model servers are busy; your answer is waiting for a place.",
            },
        )
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=delay)
    if stop.is_set():
        return False
    # Still nowhere to go: the next attempt fails the same way, and waits again.
    with contextlib.suppress(NoNodeAvailable):
        await engine.route_job_async(turn.job)
    return True


async def _record_flags(screen: OutputScreen, turn: Turn, text: str) -> None:
    try:
        await screen.finish(user_id=turn.context.user.pk, text=text, message_id=turn.assistant_message.pk)
    except DatabaseError:
        log.error("could not record the moderation flags of message %s", turn.assistant_message.pk, exc_info=True)


async def _follow_up(turn: Turn) -> None:
    """Queue what the conversation needs once this answer is in: its title (the first answer), and a
    summary of the turns the next prompt will leave out.

    Not on the thread that thread-sensitive calls share: where Celery runs tasks eagerly (`make run`,
    the tests) the task itself runs here, engine call and all, and every other answer's database work
    would wait behind it."""
    tasks = []
    if turn.assistant_message.status == Message.Status.COMPLETED and turn.untitled:
        tasks.append(after_answer)
    if turn.needs_summary:
        tasks.append(summarize_conversation)
    for task in tasks:
        try:
            await database_sync_to_async(task.delay, thread_sensitive=False)(turn.conversation.pk)
        except Exception:  # the answer is in; a title or summary is worth a log line, not its ending
            log.warning(
                "could not queue the follow-up of conversation %s (%s)", turn.conversation.pk, task.name, exc_info=True
            )

"""The driver: one generation, from the engine's stream to its settlement, whatever asked for it.

A web send, a WebSocket send, a `/v1/chat/completions` call (streamed or not) and the product's own
titles and summaries all run here, as one asyncio task per generation on the server's event loop,
detached from every connection. The driver owns what must be the same for all of them: the engine
stream (a retry on another node before the first token, inside `engine.stream`), the moderation
windows (`moderation.services.OutputScreen`: every MODERATION_WINDOW_CHARS characters and at the end;
a window that blocks aborts the engine request and nothing more reaches anyone), the heartbeat that
renews the admission lease, the stop, the status, the usage rule (`settle.billed_usage`), giving back
every hold, the metrics and the moderation flags, and keeping a completed answer in the response cache when its
request may be answered from there (chat.generation.response_cache, and semantic_cache for first questions;
a hit is replayed by `engine.stream`).

Where the text goes and where the end is kept is the generation's `Destination`: a saved chat answer
(`chat.generation.answer.SavedAnswer`: frames on the message's token stream for any number of tabs,
the message and its ledger row), a program's completion (`chat.generation.completion.Completion`:
the one caller reads it, the ledger row keeps it), or the product's own work (a title, a summary:
priced in the metrics, billed to nobody). Transports only render: the page's frames and the API's
chunks or single body are two renderings of the same events.

A stop is a command, not a disconnect: `cancel_local` sets the stop of a generation running here; the
engine request is aborted and the stream ends with what it wrote, saved as `stopped`. A saved
answer's stop reaches its process wherever it was asked: `chat.generation.actions.stop` sets a flag
and broadcasts it; this process's listener (`_listen_for_stops`) hears the broadcast, and reads the
flags of the generations here each time it subscribes, first or again after a lost Redis connection
(a broadcast reaches only the listeners subscribed when it is sent); a saved answer also reads its
flag when it starts and with each heartbeat. A program that goes away sets the stop of its
completion the same way.

When every engine is busy before the first token (503, or no node can take it), a destination that
can wait (a saved answer) is told how long (`busy` frames, the page's countdown) and the driver waits,
free plans backing off exponentially and paid ones linearly, then routes again, for at most its
`busy_wait_seconds`; one that cannot (a program's completion) ends at once with the 503.

If the server goes away (the task is cancelled), a durable destination is left as it is, for the
reaper to end by its silent heartbeat; any other is settled on the spot for what it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from channels.db import database_sync_to_async
from django.db import DatabaseError
from django.utils.translation import gettext_noop
from redis.exceptions import RedisError

from billing import services as billing
from chat.generation import admission, engine, response_cache, semantic_cache, settle
from chat.generation.engine import Job, Usage
from chat.generation.settle import BLOCKED, COMPLETED, FAILED, STOPPED, Ending
from chat.generation.streams import AccountStop, get_streams, heartbeat_ttl
from chat.generation.turn import TurnContext
from config import metrics, tracing
from config.refusals import busy_delay
from inference.errors import EngineError, EngineOverloaded
from inference.events import ChoiceDelta
from inference.routing import NoNodeAvailable
from moderation.services import OutputScreen

log = logging.getLogger(__name__)

# The notes saved with an answer (Message.error) are written here, on the event loop outside any request:
# they are kept in English, marked for the catalogue (gettext_noop) so the page can show them translated.
CRASHED = gettext_noop("Something went wrong while writing this answer. Try regenerating it.")
#: An answer that failed because no engine could take it (inference.routing.NoNodeAvailable).
NO_NODE_FAILED = gettext_noop(
    "No model server for this model is available right now. Try regenerating this answer in a little while."
)


class Destination(Protocol):
    """Where one generation's text goes as it is written, and where its end is kept."""

    #: The transport in the metrics: "chat", "api", or the product's own work ("title", "summary").
    transport: str
    #: How long to wait for a place when every engine is busy before the first token (0: end at once).
    busy_wait_seconds: float
    #: Ended by the reaper if this process dies (a saved answer); otherwise settled here if cancelled.
    durable: bool
    #: The chat message that keeps it (its moderation flags point there), if any.
    message_id: int | None

    async def opened(self) -> bool:
        """The engine is being asked. True when a stop was already asked for."""

    async def text(self, chunk: str, deltas: tuple[ChoiceDelta, ...] = ()) -> None:
        """New text, screened, for the readers (with every choice's deltas, for a program that asked
        for tools, logprobs or several choices)."""

    async def busy(self, seconds: float) -> None:
        """Every engine is busy: the next try is in `seconds`."""

    async def beat(self, text: str, reported: Usage | None) -> bool:
        """The runner is alive (every third of the heartbeat's lifetime). True when a stop was asked for."""

    async def close(self, ending: Ending, holds: settle.Holds) -> bool:
        """Keep the end and bill it (one transaction), give back the `holds` (`settle.give_back`, with
        the bill's counter update), then tell the readers. True if this call ended it."""

    async def follow_up(self) -> None:
        """What comes after an end this generation's close kept, once everything about the answer is
        recorded (a new chat's title, a summary): never before its moderation flags."""


@dataclass(eq=False)
class Generation:
    """An admitted generation, routed, with its holds: what the driver needs to run and settle it."""

    turn: TurnContext
    job: Job
    reservation: billing.Reservation | None
    destination: Destination
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    holds: settle.Holds = field(init=False)

    def __post_init__(self) -> None:
        self.holds = settle.Holds(place=self.job.rid)


@dataclass
class _Progress:
    """What the engine has produced so far."""

    parts: list[str] = field(default_factory=list)
    length: int = 0
    #: The engine's last counts (they ride on every event once known).
    reported: Usage | None = None
    #: The engine finished the stream (its counts are then final).
    finished: bool = False
    finish_reason: str = ""
    started: float = field(default_factory=time.monotonic)
    ttft_ms: int | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


#: Every generation running in this process: the loop keeps only weak references to tasks, and a
#: completion whose caller went away has no other holder until it has settled.
_running: set[asyncio.Task] = set()
#: key (a saved answer's message id) -> its stop, for the stop commands that name it.
_stop_events: dict[object, asyncio.Event] = {}
#: user id -> what each of that user's running API completions does if the account is suspended, and
#: when its watch started (time.time()).
_account_watchers: dict[int, dict[Callable[[dict], object], float]] = {}
#: A suspension kept for a listener that was away reaches the watches that started before it by this
#: process's clock, give or take this much (it was sent with another process's clock).
CLOCK_SKEW_SECONDS = 5.0
_stop_listener: asyncio.Task | None = None


def launch(generation: Generation, *, key: object = None) -> asyncio.Task:
    """Start driving `generation` in the background of this process's event loop. With a `key` (a
    saved answer's message id), a stop command for that key reaches it (`cancel_local`)."""
    # A fresh context: the runner outlives the request, and must not inherit the request's thread
    # executor (asgiref's sync_to_async would submit to it after it has shut down). It keeps only the
    # request's trace, so the answer's spans are in it.
    task = asyncio.get_running_loop().create_task(
        run(generation), name=f"generation-{generation.job.rid}", context=tracing.fresh_context()
    )
    _running.add(task)
    task.add_done_callback(_running.discard)
    if key is not None:
        _ensure_stop_listener()
        _stop_events[key] = generation.stop
        task.add_done_callback(lambda _task: _stop_events.pop(key, None))
    return task


def _ensure_stop_listener() -> None:
    global _stop_listener
    if _stop_listener is None or _stop_listener.done():
        _stop_listener = asyncio.get_running_loop().create_task(
            _listen_for_stops(), name="stop-listener", context=contextvars.Context()
        )


async def _listen_for_stops() -> None:
    """This process's listener for stop commands, for as long as the process runs (the streams keep
    it subscribed through a lost Redis connection). Each time it subscribes it first stops the
    generations here whose stop was flagged while it was not listening."""
    async for command in get_streams().stop_commands(on_listening=_stop_those_flagged):
        if isinstance(command, AccountStop):
            _tell_watchers(command, list(_account_watchers.get(command.user_id, ())))
        else:
            cancel_local(command)


def _tell_watchers(stop: AccountStop, watchers: list[Callable[[dict], object]]) -> None:
    for on_suspended in watchers:
        try:
            on_suspended(stop.refusal)
        except Exception:  # one watcher's failure must not end the process's only listener
            log.exception("a suspension watcher of user %s failed", stop.user_id)


def watch_account(user_id: int, on_suspended: Callable[[dict], object]) -> Callable[[], None]:
    """Call `on_suspended(refusal)` if `user_id`'s account is suspended (a broadcast with the stop
    commands, heard by this process's one listener: nothing per watch leaves the process). Returns
    the function that ends the watch."""
    _ensure_stop_listener()
    _account_watchers.setdefault(user_id, {})[on_suspended] = time.time()

    def unwatch() -> None:
        watchers = _account_watchers.get(user_id)
        if watchers is not None:
            watchers.pop(on_suspended, None)
            if not watchers:
                del _account_watchers[user_id]

    return unwatch


async def _stop_those_flagged() -> None:
    """What the listener may have missed while it was away: the stops flagged for the generations
    here, and the suspensions kept for the accounts watched here (for the watches started before)."""
    streams = get_streams()
    for key, stop in list(_stop_events.items()):
        if not stop.is_set() and await streams.stop_requested(key):
            cancel_local(key)
    for user_id in list(_account_watchers):
        suspension = await streams.account_stopped(user_id)
        if suspension is None:
            continue
        watchers = _account_watchers.get(user_id, {})
        before = [watcher for watcher, since in list(watchers.items()) if since <= suspension.at + CLOCK_SKEW_SECONDS]
        _tell_watchers(suspension, before)


def cancel_local(key: object) -> bool:
    """Stop a generation if it runs in this process: the engine is told to abort, and the driver
    saves what was written (with the engine's own token counts) as `stopped`."""
    stop = _stop_events.get(key)
    if stop is None:
        return False
    stop.set()
    return True


async def run(generation: Generation) -> Ending:
    """Drive `generation` to its end and settle it; returns how it ended."""
    destination, job = generation.destination, generation.job
    started = time.time()
    progress = _Progress()
    screen = OutputScreen()
    beat = asyncio.get_running_loop().create_task(_beat(generation, progress))
    metrics.IN_FLIGHT.labels(destination.transport).inc()
    operation = "text_completion" if job.prompt is not None else "chat"
    with tracing.span(
        f"{operation} {job.model}", kind=tracing.SpanKind.CLIENT, attributes=_request_attributes(operation, job)
    ) as span:
        try:
            status, error, failure = await _generate(generation, progress, screen)
        except asyncio.CancelledError:
            # Not a stop (that ends the stream normally) but the server going away.
            beat.cancel()
            metrics.IN_FLIGHT.labels(destination.transport).dec()
            if not destination.durable:
                await asyncio.shield(_settle(generation, progress, screen, STOPPED, "", None))
            raise
        beat.cancel()
        metrics.IN_FLIGHT.labels(destination.transport).dec()
        if status == STOPPED and await _stopped_by_suspension(generation, started):
            error = STOPPED_BY_SUSPENSION
        ending = await _settle(generation, progress, screen, status, error, failure)
        _record_ending(span, job, ending)
        return ending


#: A stopped answer's note when staff suspended its owner meanwhile (they stop all their answers).
STOPPED_BY_SUSPENSION = gettext_noop("Stopped: your account was suspended.")


async def _stopped_by_suspension(generation: Generation, started: float) -> bool:
    """Whether this stop was the owner's suspension (chat.suspension sends it before the stops): a
    suspension sent after the answer began, and still kept. Unknown (Redis away) reads as no."""
    try:
        suspension = await get_streams().account_stopped(generation.turn.user.pk)
    except RedisError:
        return False
    return suspension is not None and suspension.at + CLOCK_SKEW_SECONDS >= started


def _request_attributes(operation: str, job: Job) -> dict:
    """The `chat <model>` span's request, in the GenAI semantic conventions: never the prompt's text."""
    return tracing.present(
        {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": "sglang",
            "gen_ai.request.model": job.model,
            "gen_ai.request.max_tokens": job.max_tokens,
            "gen_ai.request.temperature": job.temperature,
            "gen_ai.request.top_p": job.top_p,
            "gen_ai.request.seed": job.seed,
            "gen_ai.request.stream": True,
            "sglchat.prompt_estimate_tokens": job.prompt_estimate,
        }
    )


def _record_ending(span: tracing.Span, job: Job, ending: Ending) -> None:
    """How it ended: the counts billed, time to first token, finish reason, where it ran."""
    usage = ending.usage
    tracing.record(
        span,
        {
            "gen_ai.response.model": job.engine_model or job.model,
            "gen_ai.response.id": job.rid,
            "gen_ai.response.finish_reasons": [ending.finish_reason] if ending.finish_reason else None,
            "gen_ai.response.time_to_first_chunk": ending.ttft_ms / 1000 if ending.ttft_ms is not None else None,
            "gen_ai.usage.input_tokens": usage.prompt_tokens if usage is not None else None,
            "gen_ai.usage.output_tokens": usage.completion_tokens if usage is not None else None,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens if usage is not None else None,
            "sglchat.cache_hit": (usage.cache_hit or None) if usage is not None else None,
            "sglchat.node": job.node or None,
            "sglchat.status": ending.status,
        },
    )
    if ending.status == FAILED:
        span.set_status(tracing.Status(tracing.StatusCode.ERROR, ending.failure.__class__.__name__))


async def _generate(
    generation: Generation, progress: _Progress, screen: OutputScreen
) -> tuple[str, str, Exception | None]:
    """Read the engine's stream into the destination: (status, error sentence, failure)."""
    destination, stop = generation.destination, generation.stop
    try:
        if await destination.opened():
            stop.set()
        attempt = 0
        give_up = time.monotonic() + destination.busy_wait_seconds
        while True:
            try:
                async for event in engine.stream(generation.job, stop):
                    if event.usage is not None:
                        progress.reported = event.usage
                    if event.finish_reason:
                        progress.finished, progress.finish_reason = True, event.finish_reason
                    if not (event.text or event.deltas) or screen.verdict is not None:
                        continue  # after a cut, the rest never reaches anyone
                    # Tool-call arguments are output like any text: screened, counted, billed.
                    written = event.text + "".join(delta.arguments for delta in event.deltas)
                    if written:
                        if progress.ttft_ms is None:
                            progress.ttft_ms = int((time.monotonic() - progress.started) * 1000)
                        progress.parts.append(written)
                        progress.length += len(written)
                        if screen.due(progress.length) and await screen.check(progress.text) is not None:
                            stop.set()  # the engine request is aborted; its stream ends with its token counts
                            continue
                    await destination.text(event.text, event.deltas)
                break
            except (EngineOverloaded, NoNodeAvailable) as busy:
                if progress.ttft_ms is not None or stop.is_set() or time.monotonic() >= give_up:
                    raise
                if not await _wait_while_busy(generation, busy, attempt):
                    break  # stopped while waiting: saved as stopped, with nothing written
                attempt += 1
        if screen.verdict is None and not stop.is_set():
            await screen.check(progress.text)  # the last window
    except EngineError as exc:
        log.warning("generation %s (%s) failed: %s", generation.job.rid, destination.transport, exc)
        return FAILED, exc.user_message, exc
    except NoNodeAvailable as refusal:
        return FAILED, NO_NODE_FAILED, refusal
    except Exception as exc:
        log.exception("generation %s (%s) crashed", generation.job.rid, destination.transport)
        return FAILED, CRASHED, exc
    if screen.verdict is not None:
        return BLOCKED, screen.verdict.reason, None
    return (STOPPED if stop.is_set() else COMPLETED), "", None


async def _settle(
    generation: Generation,
    progress: _Progress,
    screen: OutputScreen,
    status: str,
    error: str,
    failure: Exception | None,
) -> Ending:
    """The one usage rule, the destination's final write and bill, the admission place given back,
    the metrics and the moderation flags: the same for every generation."""
    with tracing.span("settle", attributes={"sglchat.status": status}):
        ending = Ending(
            status=status,
            error=error,
            text=progress.text,
            usage=await settle.billed_usage(
                generation.job,
                progress.text,
                progress.reported,
                final=progress.finished,
                prompt_estimate=generation.job.prompt_estimate,
            ),
            ttft_ms=progress.ttft_ms,
            finish_reason=progress.finish_reason,
            failure=failure,
        )
        destination = generation.destination
        try:
            ended = await destination.close(ending, generation.holds)
        finally:
            await settle.give_back(generation.holds)  # if the destination could not
        job = generation.job
        wanted = job.cache_key or job.similar_slot
        if ended and status == COMPLETED and wanted and progress.finished and ending.usage is not None:
            # The node's version from the fleet's snapshot, which may read the database.
            served = await database_sync_to_async(response_cache.served_version, thread_sensitive=False)(
                job.model, job.node
            )
            if response_cache.keepable(progress.finish_reason, served, job.cache_version):
                answer = response_cache.CachedAnswer(
                    pieces=progress.parts,
                    finish_reason=progress.finish_reason,
                    prompt_tokens=ending.usage.prompt_tokens,
                    completion_tokens=ending.usage.completion_tokens,
                    cached_tokens=ending.usage.cached_tokens,
                    model=job.model,
                )
                if job.cache_key:
                    await response_cache.keep(job.cache_key, answer)
                if job.similar_slot is not None:
                    await semantic_cache.keep(job.similar_slot, answer)
        if ended:
            settle.record_metrics(destination.transport, ending)
            if job.under_rollout and ending.ttft_ms is not None and not job.cached:
                metrics.NODE_TIME_TO_FIRST_TOKEN.labels(job.node).observe(ending.ttft_ms / 1000)
        try:
            await screen.finish(user_id=generation.turn.user.pk, text=ending.text, message_id=destination.message_id)
        except DatabaseError:
            log.error("could not record the moderation flags of generation %s", generation.job.rid, exc_info=True)
        if ended:
            await destination.follow_up()
        return ending


async def _beat(generation: Generation, progress: _Progress) -> None:
    """Every third of the heartbeat's lifetime: renew the admission lease, and tell the destination
    (a saved answer says "alive" and keeps its text so far, so a runner that dies loses little)."""
    interval = heartbeat_ttl() / 3
    while True:
        await asyncio.sleep(interval)
        try:
            await admission.renew([generation.job.rid])
            if await generation.destination.beat(progress.text, progress.reported):
                generation.stop.set()
        except (DatabaseError, RedisError):
            # A passing failure must not stop the heartbeat for good; the next beat tries again.
            log.warning("heartbeat of generation %s failed", generation.job.rid, exc_info=True)


async def _wait_while_busy(generation: Generation, busy: Exception, attempt: int) -> bool:
    """Tell the readers, wait, and route the request again. False when it was stopped meanwhile."""
    delay = busy_delay(
        attempt, getattr(busy, "retry_after", None), premium=generation.turn.priority == admission.PREMIUM
    )
    log.info("generation %s: engines busy (%s); retrying in %.0f s", generation.job.rid, busy, delay)
    await generation.destination.busy(delay)
    stop = generation.stop
    with (
        tracing.span("engine busy wait", attributes={"sglchat.wait_seconds": delay}),
        contextlib.suppress(TimeoutError),
    ):
        await asyncio.wait_for(stop.wait(), timeout=delay)
    if stop.is_set():
        return False
    # Still nowhere to go: the next attempt fails the same way, and waits again.
    with contextlib.suppress(NoNodeAvailable):
        await engine.route_job_async(generation.job)
    return True

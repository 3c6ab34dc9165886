"""A saved chat answer: the destination of every web and WebSocket generation (`SavedAnswer`).

Its text goes out in frames on the message's token stream, which any number of tabs follow (SSE and
WebSocket alike, `follow.py`): a frame every CHAT_FRAME_INTERVAL_MS or CHAT_FRAME_TOKENS tokens, so
the cost per frame stays bounded. It writes to the database as little as correctness allows: it marks
the answer streaming while the engine works on the first token (off the path of that token), writes
the end once (the final state with its ledger row, in one transaction: `settle.complete`), and, only
for an answer still running after a heartbeat interval, checkpoints its text with each heartbeat (with
the prompt the engine said it processed), so the reaper can keep and bill what it wrote if this
process dies. Once it has ended, it queues what the conversation needs next (its title, a summary).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DatabaseError
from django.utils.translation import gettext_noop
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from chat.generation import run, settle
from chat.generation.engine import Usage
from chat.generation.notify import announce_quietly
from chat.generation.settle import BLOCKED, COMPLETED, STOPPED, Ending
from chat.generation.start import Turn
from chat.generation.streams import BUSY, DELTA, StreamLost, get_streams
from chat.tasks import after_answer, summarize_conversation

log = logging.getLogger(__name__)

#: Sent on the answer's stream by its runner, outside any request: English, marked for the catalogue.
BUSY_MESSAGE = gettext_noop("The model servers are busy; your answer is waiting for a place.")


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


class SavedAnswer:
    """The destination of a chat answer: the message's token stream for its readers, the message and
    its ledger row for its end (see the module's docstring)."""

    transport = "chat"
    durable = True

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.message_id = turn.assistant_message.pk
        self.busy_wait_seconds = settings.CHAT_BUSY_RETRY_SECONDS
        self.frames = _Frames(self.message_id)
        self._marking: asyncio.Task | None = None
        self._checkpointed: str | None = None

    async def opened(self) -> bool:
        # Marked streaming while the engine works on the first token; readers see no frame before it is.
        self._marking = asyncio.get_running_loop().create_task(self._mark_streaming())
        turn = self.turn
        if turn.continued:
            # An answer that continues a cut one shows that one's text at once, before the engine's.
            await self._marking
            self._marking = None
            self.frames.add(turn.continued)
            await self.frames.flush()
        await announce_quietly(turn.context.user.pk, turn.conversation.pk, self.message_id, active=True)
        # If Redis cannot say now, go on: later stops still arrive as commands (and with each heartbeat).
        with contextlib.suppress(RedisError):
            return await get_streams().stop_requested(self.message_id)
        return False

    async def _mark_streaming(self) -> None:
        """A label, not the answer: if the database cannot take it now, the answer goes on (its end is
        written with retries, and the reaper's rule does not depend on it)."""
        try:
            await database_sync_to_async(settle.mark_streaming)(self.message_id, self.turn.job.node)
        except DatabaseError:
            log.warning("could not mark message %s streaming", self.message_id, exc_info=True)

    async def text(self, chunk: str, deltas: tuple = ()) -> None:
        # A chat answer asks for none of what choice deltas carry (tools, logprobs, n): its text is all.
        self.frames.add(chunk)
        if self.frames.due():
            if self._marking is not None:
                await self._marking
                self._marking = None
            await self.frames.flush()

    async def busy(self, seconds: float) -> None:
        with contextlib.suppress(RedisError):
            await get_streams().append(self.message_id, BUSY, {"retry_after": round(seconds), "message": BUSY_MESSAGE})

    async def beat(self, text: str, reported: Usage | None) -> bool:
        """Say "alive", keep the text sent so far (and the engine's prompt count) for the reaper, and
        look for a stop asked for meanwhile: one the broadcast could not bring (Redis reconnecting)
        is honoured within a heartbeat."""
        streams = get_streams()
        await streams.beat(self.message_id)
        sent = "".join(self.frames.text_parts)
        if sent != self._checkpointed:
            await database_sync_to_async(settle.checkpoint)(self.message_id, sent, reported)
            self._checkpointed = sent
        return await streams.stop_requested(self.message_id)

    async def close(self, ending: Ending, holds: settle.Holds) -> bool:
        if self._marking is not None:
            await asyncio.gather(self._marking, return_exceptions=True)  # before the final write, never after it
        last_chunk = self.frames.take()
        if ending.status == BLOCKED:
            last_chunk = ""  # what was not sent yet never is
        turn = self.turn
        if turn.continued:
            ending = dataclasses.replace(ending, text=turn.continued + ending.text)  # the saved answer is whole
        ended = await settle.complete(
            turn.assistant_message,
            turn.reservation,
            ending,
            holds,
            owner_id=turn.context.user.pk,
            user=turn.context.user,
            node=turn.job.node,
            last_chunk=last_chunk,
            period=turn.context.billing,
            sent=self.frames.sent,
        )
        return ended

    async def follow_up(self) -> None:
        """Queue what the conversation needs once this answer is in: its title (after the first answer,
        however it ended: the model's for a completed or stopped one, the question's first words for
        one that was blocked or failed, which the model is not asked to repeat), and a summary of the
        turns the next prompt will leave out.

        Not on the thread that thread-sensitive calls share: where Celery runs tasks eagerly (`make run`,
        the tests) the task itself runs here, engine call and all, and every other answer's database work
        would wait behind it."""
        turn = self.turn
        tasks = []
        if turn.untitled:
            ask_model = turn.assistant_message.status in (COMPLETED, STOPPED)
            tasks.append((after_answer, {"ask_model": ask_model}))
        if turn.needs_summary:
            tasks.append((summarize_conversation, {}))
        for task, options in tasks:
            try:
                await database_sync_to_async(task.delay, thread_sensitive=False)(turn.conversation.pk, **options)
            except Exception:  # the answer is in; a title or summary is worth a log line, not its ending
                log.warning(
                    "could not queue the follow-up of conversation %s (%s)",
                    turn.conversation.pk,
                    task.name,
                    exc_info=True,
                )


def generation_for(turn: Turn) -> run.Generation:
    return run.Generation(turn=turn.context, job=turn.job, reservation=turn.reservation, destination=SavedAnswer(turn))


def launch(turn: Turn) -> asyncio.Task:
    """Start writing `turn`'s answer in the background of this process's event loop; a stop for its
    message reaches it wherever it is asked."""
    get_streams().producing(turn.assistant_message.pk)
    return run.launch(generation_for(turn), key=turn.assistant_message.pk)

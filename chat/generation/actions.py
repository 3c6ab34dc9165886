"""The chat actions every transport calls: send, regenerate, continue, edit, stop.

Each starts the turn (chat.generation.start: admit and persist, synchronous, in one worker thread)
and then launches the runner on this process's event loop. HTTP views, the SSE endpoint and the
WebSocket consumer all call these, so a rule or a limit is never applied on one transport and
missed on another.
"""

from __future__ import annotations

from channels.db import database_sync_to_async

from accounts.models import User
from chat import selectors
from chat.generation import answer, run, start
from chat.generation.start import Turn
from chat.generation.streams import get_streams
from chat.models import Message


async def send_message(user: User, **fields) -> Turn:
    turn = await database_sync_to_async(start.start_turn)(user, **fields)
    answer.launch(turn)
    return turn


async def regenerate(user: User, message_id: int, *, ip: str | None = None, model: object = None) -> Turn:
    turn = await database_sync_to_async(start.start_regeneration)(user, message_id, ip=ip, model=model)
    answer.launch(turn)
    return turn


async def continue_answer(user: User, message_id: int, *, ip: str | None = None) -> Turn:
    turn = await database_sync_to_async(start.start_continuation)(user, message_id, ip=ip)
    answer.launch(turn)
    return turn


async def edit_and_resend(user: User, message_id: int, content: object, *, ip: str | None = None) -> Turn:
    turn = await database_sync_to_async(start.start_edit)(user, message_id, content, ip=ip)
    answer.launch(turn)
    return turn


async def stop(user: User, message_id: int) -> Message:
    """Ask the runner of `message_id`, wherever it runs, to stop and keep what it wrote."""
    message = await database_sync_to_async(selectors.get_message)(user, message_id)
    # Locally at once when it runs here; otherwise through the stop broadcast.
    if message.is_active and not run.cancel_local(message_id):
        await get_streams().request_stop(message_id)
    return message

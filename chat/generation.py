"""The chat actions every transport calls: send, regenerate, edit, stop.

Each admits and persists through chat.services (synchronous, in a thread), then starts the runner
on this process's event loop. HTTP views, the SSE endpoint and the WebSocket consumer all call
these, so a rule or a limit is never applied on one transport and missed on another.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async

from accounts.models import User
from chat import runner, selectors, services
from chat.models import Message
from chat.streams import get_streams


async def _launch(turn: services.Turn) -> services.Turn:
    runner.launch(turn.assistant_message.pk, turn.reservation)
    return turn


async def send_message(user: User, **fields) -> services.Turn:
    return await _launch(await sync_to_async(services.start_turn)(user, **fields))


async def regenerate(user: User, message_id: int, *, ip: str | None = None) -> services.Turn:
    return await _launch(await sync_to_async(services.start_regeneration)(user, message_id, ip=ip))


async def edit_and_resend(user: User, message_id: int, content: object, *, ip: str | None = None) -> services.Turn:
    return await _launch(await sync_to_async(services.start_edit)(user, message_id, content, ip=ip))


async def stop(user: User, message_id: int) -> Message:
    """Ask the runner of `message_id`, wherever it runs, to stop and keep what it wrote."""
    message = await sync_to_async(selectors.get_message)(user, message_id)
    # Locally at once when it runs here; otherwise through the stop broadcast.
    if message.is_active and not runner.cancel_local(message_id):
        await get_streams().request_stop(message_id)
    return message

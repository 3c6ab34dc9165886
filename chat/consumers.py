"""The WebSocket transport (`/ws/chat/`): commands in, tokens and live state out.

A thin adapter over chat.generation, like the HTTP views: the same actions admit, persist and
stop, and answers are delivered by the same `follow_answer` as SSE. Frames are documented in
docs/chat-protocol.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.core.exceptions import ObjectDoesNotExist
from django.db import DatabaseError
from django.utils import translation
from django.utils.translation import gettext as _
from redis.exceptions import RedisError

from accounts.preferences import socket_language
from accounts.sessions import session_refusal, session_tag
from accounts.standing import account_refusal
from chat import selectors
from chat.generation import actions
from chat.generation.follow import follow_answer
from chat.generation.notify import user_group
from chat.generation.streams import BUSY, DELTA, KEEPALIVE, is_frame_id
from chat.http import files_sent, optional_id
from chat.serializers import conversation_json, message_json
from chat.session_end import session_group
from config import tracing
from config.http import client_ip
from config.loop_handler import request_threads
from config.overload import busy, running_late
from config.refusal_counts import count_refusal
from config.refusals import BadInput, Busy, Refusal
from config.request_limits import frame_refusal
from config.text import parse_json, shown, unstorable_json_text

CLOSE_UNAUTHENTICATED = 4401
CLOSE_SUSPENDED = 4403


def _turn_frame(turn, ref) -> dict:
    return {
        "type": "accepted",
        "ref": ref,
        "conversation": conversation_json(turn.conversation, generating=True),
        "user_message": message_json(turn.user_message),
        "assistant_message": message_json(turn.assistant_message),
    }


class ChatConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.user = self.scope.get("user")
        self.followers: dict[int, asyncio.Task] = {}
        # The sentences this socket sends (refusals, notes) speak the person's language, as the pages do.
        self.language = socket_language(self.user, self.scope) if self.user is not None else None
        # Accept, then close with a code: a refused handshake is a bare 403 a browser cannot read.
        if self.user is None or not self.user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        refusal = account_refusal(self.user)
        if refusal is not None:
            await self.accept()
            await self._refuse_account(refusal.as_dict())
            return
        self.group = user_group(self.user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        # Signing this session out ends this socket (chat.session_end); the key follows a password
        # change made in this session.
        self.session_key = self.scope["session"].session_key
        await self.channel_layer.group_add(session_group(self.session_key), self.channel_name)
        await self.accept()
        generating = await database_sync_to_async(selectors.active_generations)(self.user)
        await self.send_json({"type": "hello", "generating": generating})

    async def disconnect(self, code: int) -> None:
        # Leaving does not stop any generation; it only stops following them.
        for task in self.followers.values():
            task.cancel()
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if getattr(self, "session_key", None):
            await self.channel_layer.group_discard(session_group(self.session_key), self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        # Each command is a trace of its own, as an HTTP request is (a socket may stay open for hours).
        kind = content.get("type") if isinstance(content, dict) else None
        name = f"WebSocket {kind}" if isinstance(kind, str) and kind in self.commands else "WebSocket frame"
        with (
            tracing.span(name, kind=tracing.SpanKind.SERVER, attributes={"http.route": self.scope.get("path", "")}),
            translation.override(self.language),
        ):
            await self._command(content)

    async def _command(self, content) -> None:
        ref = content.get("ref") if isinstance(content, dict) else None
        # The user was read at connect; a suspension, a password change or the session's end since then
        # is read again before each command (one query, and the session from the cache).
        await self.user.arefresh_from_db(
            fields=["is_suspended", "suspended_reason", "is_active", "password", "sessions_ended_at"]
        )
        ended = await database_sync_to_async(session_refusal)(self.session_key, self.user)
        if ended is not None:
            await self._end_session(ended.as_dict(), ref)
            return
        refusal = account_refusal(self.user)
        if refusal is not None:
            await self._refuse_account(refusal.as_dict(), ref)
            return
        try:
            if not isinstance(content, dict):
                raise BadInput("Each frame must be a JSON object.")
            kind = content.get("type")
            handler = self.commands.get(kind) if isinstance(kind, str) else None
            if handler is None:
                raise BadInput(f"Unknown frame type {shown(kind)}: send one of {', '.join(self.commands)}.")
            if handler in (ChatConsumer._send, ChatConsumer._regenerate, ChatConsumer._continue) and running_late():
                raise busy()  # as the HTTP gate does: new work waits while the process catches up
            # On a thread of the command's own, as an HTTP request's: not the one thread that
            # thread-sensitive work shares outside a request, where a paid send waiting for an
            # admission place would hold up every other socket's commands in this process.
            async with request_threads.lent():
                await handler(self, content, ref)
        except Refusal as refusal:
            await self.send_json({"type": "error", "ref": ref, **refusal.as_dict()})
            await count_refusal(refusal.status)  # as the HTTP gate counts its 429s and 503s

    async def _refuse_account(self, refusal: dict, ref=None) -> None:
        """Say why in an error frame (a close reason is too short for it, and Daphne drops it), then close."""
        await self.send_json({"type": "error", "ref": ref, **refusal})
        await self.close(code=CLOSE_SUSPENDED)

    async def chat_account_refused(self, event: dict) -> None:
        """Staff suspended the account (chat.suspension): say why, in this socket's language (the event's
        sentence is in English, for the API's completions), and close."""
        refusal = event["refusal"]
        with contextlib.suppress(DatabaseError, ObjectDoesNotExist), translation.override(self.language):
            await self.user.arefresh_from_db(
                fields=["is_suspended", "suspended_reason", "suspended_until", "banned_at", "is_active"]
            )
            own = account_refusal(self.user)
            if own is not None:
                refusal = own.as_dict()
        await self._refuse_account(refusal)

    async def _end_session(self, refusal: dict, ref=None) -> None:
        """The socket's session no longer signs the user in: no more of their answers, say why, close."""
        for task in self.followers.values():
            task.cancel()
        await self.send_json({"type": "error", "ref": ref, **refusal})
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def chat_session_ended(self, event: dict) -> None:
        """This socket's session signed out (chat.session_end)."""
        await self._end_session(event["refusal"])

    async def chat_password_changed(self, event: dict) -> None:
        """The user's password changed (chat.session_end): the session that changed it goes on under its
        new key, and so does this socket if it is one of that session's; any other session has ended."""
        if event["kept"] is None or event["kept"] != session_tag(self.session_key):
            await self._end_session(event["refusal"])
            return
        await self.channel_layer.group_discard(session_group(self.session_key), self.channel_name)
        self.session_key = event["key"]
        await self.channel_layer.group_add(session_group(self.session_key), self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        # Every frame is read here, and one that cannot be read is answered with an error frame; the
        # socket stays open. Over the size limit: refused before it is decoded. Binary: not read at all.
        # Then config.text, the one reader of request JSON (not JSON, too deep, NUL, lone surrogates).
        refusal, content = frame_refusal(text_data, bytes_data), None
        if refusal is None and text_data is None:
            refusal = BadInput("Send each command as a text frame holding a JSON object; binary frames are not read.")
        if refusal is None:
            try:
                content = parse_json(text_data, "frame")
            except Refusal as unreadable:
                refusal = unreadable
            else:
                refusal = unstorable_json_text(text_data, content)
        if refusal is not None:
            ref = content.get("ref") if isinstance(content, dict) else None
            await self.send_json({"type": "error", "ref": ref, **refusal.as_dict()})
            return
        await self.receive_json(content, **kwargs)

    # --- commands ------------------------------------------------------------------------------

    def _ip(self) -> str | None:
        return client_ip(self.scope)

    async def _send(self, content: dict, ref) -> None:
        turn = await actions.send_message(
            self.user,
            content=content.get("content"),
            conversation_id=optional_id(content.get("conversation_id"), "conversation_id"),
            model=content.get("model"),
            parent_id=optional_id(content.get("parent_id"), "parent_id"),
            files=files_sent(content),
            ip=self._ip(),
        )
        await self.send_json(_turn_frame(turn, ref))
        self._follow(turn.assistant_message, None)

    async def _regenerate(self, content: dict, ref) -> None:
        message_id = _required_id(content, "message_id")
        turn = await actions.regenerate(self.user, message_id, ip=self._ip(), model=content.get("model"))
        await self.send_json(_turn_frame(turn, ref))
        self._follow(turn.assistant_message, None)

    async def _continue(self, content: dict, ref) -> None:
        turn = await actions.continue_answer(self.user, _required_id(content, "message_id"), ip=self._ip())
        await self.send_json(_turn_frame(turn, ref))
        self._follow(turn.assistant_message, None)

    async def _attach(self, content: dict, ref) -> None:
        message = await database_sync_to_async(selectors.answer_to_follow)(
            self.user, _required_id(content, "message_id")
        )
        after = content.get("after")
        if after is not None and (not isinstance(after, str) or not is_frame_id(after)):
            raise BadInput("after must be an event id from this message's stream.")
        self._follow(message, after)

    async def _detach(self, content: dict, ref) -> None:
        task = self.followers.pop(_required_id(content, "message_id"), None)
        if task is not None:
            task.cancel()

    async def _stop(self, content: dict, ref) -> None:
        message = await actions.stop(self.user, _required_id(content, "message_id"))
        await self.send_json({"type": "stopping", "ref": ref, "message_id": message.pk})

    commands = {
        "send": _send,
        "regenerate": _regenerate,
        "continue": _continue,
        "attach": _attach,
        "detach": _detach,
        "stop": _stop,
    }

    # --- following answers ------------------------------------------------------------------------

    def _follow(self, message, after: str | None) -> None:
        previous = self.followers.pop(message.pk, None)
        if previous is not None:
            previous.cancel()
        # A fresh context: the follower outlives the command that started it, and must not inherit the
        # command's thread (asgiref refuses thread-sensitive calls made through a context that has exited).
        self.followers[message.pk] = asyncio.get_running_loop().create_task(
            self._forward(message, after), context=contextvars.Context()
        )

    async def _forward(self, message, after: str | None) -> None:
        last = after
        with contextlib.suppress(asyncio.CancelledError):
            try:
                async for frame in follow_answer(message, after):
                    if frame.kind == KEEPALIVE:
                        continue
                    last = frame.id
                    if frame.kind == DELTA:
                        await self.send_json(
                            {
                                "type": "delta",
                                "message_id": message.pk,
                                "id": frame.id,
                                "text": frame.data.get("text", ""),
                            }
                        )
                    elif frame.kind == BUSY:
                        await self.send_json({"type": "busy", "message_id": message.pk, "id": frame.id, **frame.data})
                    else:
                        await self.send_json({"type": "done", "message_id": message.pk, "id": frame.id, **frame.data})
            except RedisError:
                # The answer goes on; this reader lost its stream. Say so, and where to resume from.
                with translation.override(self.language):  # a follower runs in a context of its own
                    refusal = Busy(
                        _("The answer's stream cannot be read just now: attach again to resume it."), retry_after=2
                    )
                await self.send_json({"type": "error", "message_id": message.pk, "after": last, **refusal.as_dict()})
        self.followers.pop(message.pk, None)

    # --- group events -------------------------------------------------------------------------------

    async def chat_conversation(self, event: dict) -> None:
        await self.send_json({"type": "conversation", "conversation": event["conversation"]})

    async def chat_generating(self, event: dict) -> None:
        await self.send_json(
            {
                "type": "generating",
                "conversation_id": event["conversation_id"],
                "message_id": event["message_id"],
                "active": event["active"],
            }
        )


def _required_id(content: dict, name: str) -> int:
    value = optional_id(content.get(name), name)
    if value is None:
        raise BadInput(f"{name} is required.")
    return value

"""GET /chat/api/messages/<id>/stream: one answer's tokens as Server-Sent Events, served beside Django.

Readers are the most numerous requests (every tab following an answer, each for its whole length),
and they need none of what Django's middleware chain does for pages: so this endpoint is a Channels
HTTP consumer that reads the session cookie itself, asking the same rules the chat's other
endpoints ask (signed in, `accounts.standing` for suspension and staff two-factor, `chat.selectors`
for ownership) and answering refusals in the same JSON shape. It holds no thread and no database
connection while it streams. Its refusals are answered as config.http answers every route outside
Django (`bare_refusal`): the chat's JSON error, with its status and Retry-After.
"""

from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.http import AsyncHttpConsumer
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AnonymousUser
from django.http.cookie import parse_cookie

from accounts.standing import account_refusal, two_factor_refusal
from chat import selectors
from chat.generation.streams import is_frame_id
from chat.http import not_signed_in
from chat.sse import STREAM_HEADERS, answer_events
from config.http import bare_refusal
from config.overload import OVERLOAD_ERRORS, busy
from config.refusals import BadInput, Refusal


class MethodNotAllowed(Refusal):
    status, code = 405, "method_not_allowed"


HEADERS = [
    (b"content-type", b"text/event-stream"),
    *((name.lower().encode(), value.encode()) for name, value in STREAM_HEADERS.items()),
    (b"x-content-type-options", b"nosniff"),
]


def _signed_in(session_key: str | None):
    """The user of the session cookie, as Django's own middleware would find them (the session's hash
    checked against the password's), or AnonymousUser."""
    if not session_key:
        return AnonymousUser()
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return auth.get_user(SimpleNamespace(session=session))


def _opened(session_key: str | None, message_id: int, after: str | None):
    """The answer the session's user may follow, or the refusal (in the order the page's endpoints
    decide them); None when nobody is signed in. One trip to the database, in any worker thread."""
    user = _signed_in(session_key)
    if not user.is_authenticated:
        return None
    refusal = account_refusal(user) or two_factor_refusal(user)
    if refusal is not None:
        raise refusal
    message = selectors.answer_to_follow(user, message_id)
    if after is not None and not is_frame_id(after):
        raise BadInput("Last-Event-ID is not an event id from this stream.")
    return message


class AnswerStreamConsumer(AsyncHttpConsumer):
    async def handle(self, body: bytes) -> None:
        if self.scope["method"] not in ("GET", "HEAD"):
            return await self._refuse(MethodNotAllowed("Only GET reads an answer's stream."))
        after = self._after()
        try:
            # Not thread-sensitive: readers open in parallel on the loop's worker threads instead of
            # queueing on the one thread that thread-sensitive calls share outside a Django request.
            message = await database_sync_to_async(_opened, thread_sensitive=False)(
                self._session_key(), self.scope["url_route"]["kwargs"]["message_id"], after
            )
        except Refusal as refusal:
            return await self._refuse(refusal)
        except OVERLOAD_ERRORS:
            return await self._refuse(busy())
        if message is None:
            return await self._refuse(not_signed_in())
        await self.send_headers(status=200, headers=HEADERS)
        async for chunk in answer_events(message, after):
            await self.send_body(chunk, more_body=True)
        await self.send_body(b"")

    def _session_key(self) -> str | None:
        for name, value in self.scope.get("headers", []):
            if name == b"cookie":
                return parse_cookie(value.decode("latin-1")).get(settings.SESSION_COOKIE_NAME)
        return None

    def _after(self) -> str | None:
        for name, value in self.scope.get("headers", []):
            if name == b"last-event-id" and value:
                return value.decode("latin-1")
        return parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("after", [None])[0] or None

    async def _refuse(self, refusal: Refusal) -> None:
        status, headers, body = bare_refusal(self.scope, refusal)
        await self.send_response(status, body, headers=headers)

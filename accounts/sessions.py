"""Whether a session still signs its user in, for connections that outlive a request (the chat's
WebSocket), and the sentence when it no longer does.

Django decides this for each request in its authentication middleware: the session exists, names the
user, and holds the user's current session auth hash (the password's, and `sessions_ended_at`'s:
accounts.models.User). A WebSocket authenticates once, at its handshake; it asks `session_refusal`
before each command, and `chat.session_end` closes it at once when its session signs out or the
password changes.
"""

from __future__ import annotations

import hashlib
from importlib import import_module

from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
from django.utils.crypto import constant_time_compare
from django.utils.translation import gettext_lazy

from accounts.models import User
from config.refusals import Refusal

SIGNED_OUT = gettext_lazy(
    "You signed out (or your sign-in expired), so this connection has ended. Sign in again to go on."
)
CHANGED_ELSEWHERE = gettext_lazy(
    "Your password changed (or this sign-in was ended elsewhere), so this connection has ended. "
    "Sign in again with the new password to go on."
)


class SessionEnded(Refusal):
    """401 `session_ended`: the session a long-lived connection was opened with no longer signs anyone in."""

    status, code = 401, "session_ended"


def signed_out() -> SessionEnded:
    return SessionEnded(SIGNED_OUT)


def password_changed() -> SessionEnded:
    return SessionEnded(CHANGED_ELSEWHERE)


def session_tag(session_key: str) -> str:
    """A name for a session that is not its key (the key signs whoever holds it in): for channel-layer
    group names and events."""
    return hashlib.sha256(session_key.encode()).hexdigest()[:32]


def session_refusal(session_key: str | None, user: User) -> SessionEnded | None:
    """None while the session `session_key` still signs `user` in, as Django would decide for a request;
    otherwise why not. `user` must be freshly read (its password and `sessions_ended_at`). Costs one
    read of the session: the cache, or one query when the cache does not hold it."""
    if not session_key:
        return signed_out()
    data = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    if data.get(SESSION_KEY) != str(user.pk):  # deleted, expired, signed out, or someone else's
        return signed_out()
    held = data.get(HASH_SESSION_KEY) or ""
    if held and (
        constant_time_compare(held, user.get_session_auth_hash())
        or any(constant_time_compare(held, old) for old in user.get_session_auth_fallback_hash())
    ):
        return None
    return password_changed()

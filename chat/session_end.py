"""An open chat WebSocket ends with its sign-in.

A socket authenticates once, at its handshake, so without this it would outlive what ends a sign-in:
- signing out (`user_logged_out`) ends every socket of that session, and only of that session (the
  same person's other browsers stay signed in): each socket joins its session's channel-layer group;
- a password change, set or reset (allauth's signals) ends every socket of every other session of the
  user, as Django ends those sessions; the session that made the change goes on under the new key
  Django gave it (`config.sessions.SessionStore.previous_key` names the old one its sockets hold), and
  so do its sockets.
Each socket is told why in an error frame and closed with 4401 (ChatConsumer). Whatever ends a
session without these signals (it expired, staff set the password in the admin) is caught by the
check the socket makes before each command (`accounts.sessions.session_refusal`).
"""

from __future__ import annotations

import logging

from allauth.account.signals import password_changed, password_reset, password_set
from channels.layers import get_channel_layer
from django.contrib.auth import SESSION_KEY
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver
from redis.exceptions import RedisError

from accounts import sessions
from chat.generation.notify import user_group
from chat.suspension import run_to_end

log = logging.getLogger(__name__)

#: Channel-layer events ChatConsumer handles (chat_session_ended, chat_password_changed).
SESSION_ENDED = "chat.session_ended"
SIGN_IN_CHANGED = "chat.password_changed"


def session_group(session_key: str) -> str:
    return f"chat.session.{sessions.session_tag(session_key)}"


async def _tell(group: str, event: dict) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group, event)


def _tell_from_a_request(group: str, event: dict) -> None:
    try:
        run_to_end(_tell, group, event)
    except (RedisError, OSError):
        # The sign-out or change itself stands; each socket's next command finds its session ended.
        log.warning("could not tell the sockets of %s that their sign-in ended", group, exc_info=True)


@receiver(user_logged_out, dispatch_uid="chat.session_end.signed_out")
def end_the_sessions_sockets(sender, request, user, **kwargs) -> None:
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if user is None or not session_key:  # sent before Django flushes the session, so the key is still there
        return
    event = {"type": SESSION_ENDED, "refusal": sessions.signed_out().as_dict()}
    _tell_from_a_request(session_group(session_key), event)


@receiver([password_changed, password_set, password_reset], dispatch_uid="chat.session_end.password_changed")
def end_the_other_sessions_sockets(sender, request, user, **kwargs) -> None:
    event = {"type": SIGN_IN_CHANGED, "refusal": sessions.password_changed().as_dict(), "kept": None, "key": None}
    session = getattr(request, "session", None)
    if session is not None and session.session_key and session.get(SESSION_KEY) == str(user.pk):
        # The session that made the change stays signed in (update_session_auth_hash) under a new key.
        # Saved now, so its sockets find the new key and hash when they follow it, before the response.
        session.save()
        kept = getattr(session, "previous_key", None) or session.session_key
        event.update(kept=sessions.session_tag(kept), key=session.session_key)
    _tell_from_a_request(user_group(user.pk), event)

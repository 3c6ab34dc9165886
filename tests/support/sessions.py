"""A browser's session with a live server, for tests that talk to Daphne over real sockets: the
session cookie of a signed-in user, and the CSRF cookie and headers the page's script sends."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore

#: Any well-formed secret: Django compares the CSRF cookie with the header (or the form's field).
CSRF = "c" * 32


def session_cookie_for(user) -> dict[str, str]:
    """A signed-in session for `user`, as the cookie a browser would hold."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return {settings.SESSION_COOKIE_NAME: session.session_key}


def with_csrf(cookies: dict[str, str]) -> dict[str, str]:
    """`cookies` and the CSRF cookie a page of the product would have set beside them."""
    return {**cookies, "csrftoken": CSRF}


def browser_cookies(user) -> dict[str, str]:
    """What a browser signed in as `user` holds after loading a page: the session and the CSRF cookie."""
    return with_csrf(session_cookie_for(user))


def csrf_headers(server) -> dict[str, str]:
    """What the page's script sends with each POST to `server`: the CSRF token, from the same origin."""
    return {"X-CSRFToken": CSRF, "Referer": server.base_url + "/"}


def cookie_header(cookies: dict[str, str]) -> str:
    """`cookies` as one Cookie header, as a browser sends them with a WebSocket handshake."""
    return "; ".join(f"{k}={v}" for k, v in cookies.items())

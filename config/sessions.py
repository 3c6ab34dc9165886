"""The session engine: Django's cached_db (read from the cache, written through to the database),
remembering the key a cycle replaced.

Django gives a session a new key when its sign-in changes (signing in, a password change through
`update_session_auth_hash`), and the old key stops existing. A chat WebSocket opened before holds the
old key; when the password change is this session's own, `chat.session_end` tells that socket the new
key from `previous_key`, so it goes on as the session does, while every other session's sockets end.
"""

from __future__ import annotations

from django.contrib.sessions.backends.cached_db import SessionStore as CachedDbSessionStore


class SessionStore(CachedDbSessionStore):
    #: The key this session had before its last cycle in this request, or None.
    previous_key: str | None = None

    def cycle_key(self) -> None:
        previous = self.session_key
        super().cycle_key()
        if previous:
            self.previous_key = previous

    async def acycle_key(self) -> None:
        previous = self.session_key
        await super().acycle_key()
        if previous:
            self.previous_key = previous

"""An open chat WebSocket ends with its sign-in: signing out ends that session's sockets (and no other
session's), a password change ends every other session's sockets (the session that changed it goes on,
as Django keeps it signed in), and each command first checks that the socket's session still signs the
user in. On the real Daphne, through the real sign-out and password-change pages."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager

import pytest
import websockets
from django.conf import settings
from django.contrib.sessions.backends.cached_db import SessionStore
from django.db import connections

from chat.models import Message
from tests.chat.live import ChatClient
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)

NEW_PASSWORD = "a-brand-new-long-passphrase-42"
FRAME_SECONDS = 20


@asynccontextmanager
async def socket_of(server, chat: ChatClient):
    """A socket on the session `chat` started with (its HTTP client follows later cookies; this does not)."""
    async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=chat.ws_headers()) as ws:
        assert json.loads(await asyncio.wait_for(ws.recv(), FRAME_SECONDS))["type"] == "hello"
        yield ws


async def frames_until_closed(ws) -> tuple[list[dict], int | None]:
    frames = []
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), FRAME_SECONDS)))
    return frames, ws.close_code


async def send_is_accepted(ws, content: str) -> dict:
    await ws.send(json.dumps({"type": "send", "ref": content, "content": content}))
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), FRAME_SECONDS))
        if frame.get("ref") == content:
            assert frame["type"] == "accepted", frame
            return frame


def ended_frame(frames: list[dict]) -> dict:
    errors = [f for f in frames if f["type"] == "error"]
    assert errors, frames
    assert errors[-1]["code"] == "session_ended" and errors[-1]["status"] == 401, errors
    return errors[-1]


async def in_a_thread(work):
    """`work()` on a worker thread while the test's loop keeps its sockets, and that thread's database
    connection closed after it (it would outlive the test)."""

    def run():
        try:
            return work()
        finally:
            connections.close_all()

    return await asyncio.to_thread(run)


def nothing_saved(content: str) -> bool:
    return not Message.objects.filter(content=content).exists()


def test_signing_out_ends_that_sessions_sockets_and_no_other_sessions(server, user):
    here, elsewhere = ChatClient(server, user), ChatClient(server, user)

    async def scenario():
        async with socket_of(server, here) as mine, socket_of(server, elsewhere) as theirs:
            signed_out = await asyncio.to_thread(here.http.post, "/accounts/logout/")
            assert signed_out.status_code == 302, signed_out.text[:300]
            frames, code = await frames_until_closed(mine)
            with pytest.raises(websockets.ConnectionClosed):
                await mine.send(json.dumps({"type": "send", "ref": "x", "content": "after signing out"}))
            # The same person's other session did not sign out: its socket goes on.
            await send_is_accepted(theirs, "still signed in elsewhere")
            return frames, code

    frames, code = asyncio.run(scenario())
    assert code == 4401
    assert "You signed out" in ended_frame(frames)["message"]
    assert nothing_saved("after signing out")
    here.close()
    elsewhere.close()


def test_each_command_checks_that_the_sockets_session_still_signs_the_user_in(server, user):
    """Without any signal: the session deleted behind the socket's back (expired, cleared), or the
    password changed where no sign-in page saw it (the admin, `manage.py changepassword`)."""
    gone, changed = ChatClient(server, user), ChatClient(server, user)

    async def scenario():
        async with socket_of(server, gone) as first, socket_of(server, changed) as second:
            await in_a_thread(SessionStore(gone.cookies[settings.SESSION_COOKIE_NAME]).delete)
            await first.send(json.dumps({"type": "send", "ref": "a", "content": "on a deleted session"}))
            deleted = await frames_until_closed(first)

            def change_password():
                user.set_password(NEW_PASSWORD)
                user.save()

            await in_a_thread(change_password)
            await second.send(json.dumps({"type": "attach", "ref": "b", "message_id": 1}))
            stale = await frames_until_closed(second)
            return deleted, stale

    (deleted_frames, deleted_code), (stale_frames, stale_code) = asyncio.run(scenario())
    assert deleted_code == 4401 and "You signed out" in ended_frame(deleted_frames)["message"]
    assert ended_frame(deleted_frames)["ref"] == "a"
    assert nothing_saved("on a deleted session")
    assert stale_code == 4401 and "Your password changed" in ended_frame(stale_frames)["message"]
    gone.close()
    changed.close()


def test_a_password_change_ends_the_other_sessions_sockets_and_keeps_the_one_that_changed_it(server, user):
    thief, owner = ChatClient(server, user), ChatClient(server, user)

    async def scenario():
        async with socket_of(server, thief) as stolen, socket_of(server, owner) as own:
            changed = await asyncio.to_thread(
                owner.http.post,
                "/accounts/password/change/",
                data={"oldpassword": PASSWORD, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
            )
            assert changed.status_code == 302, changed.text[:500]
            frames, code = await frames_until_closed(stolen)
            with pytest.raises(websockets.ConnectionClosed):
                await stolen.send(json.dumps({"type": "send", "ref": "x", "content": "a thief's message"}))
            # The owner's socket (opened with the session key the change replaced) goes on...
            await send_is_accepted(own, "the owner goes on")
            # ...and follows its session under the new key: signing out now ends it too.
            signed_out = await asyncio.to_thread(owner.http.post, "/accounts/logout/")
            assert signed_out.status_code == 302
            owner_frames, owner_code = await frames_until_closed(own)
            return frames, code, owner_frames, owner_code

    frames, code, owner_frames, owner_code = asyncio.run(scenario())
    assert code == 4401
    assert "Your password changed" in ended_frame(frames)["message"]
    assert nothing_saved("a thief's message")
    assert owner_code == 4401 and "You signed out" in ended_frame(owner_frames)["message"]
    thief.close()
    owner.close()

"""A WebSocket opened by a page of another site is refused, even with the user's session cookie."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from tests.security.authz_world import build_world
from tests.security.live_matrix import FRAME_DEADLINE, cookies_for, ws_headers


async def _handshake(server, headers: dict) -> int | str:
    try:
        async with websockets.connect(server.ws_url + "/ws/chat/", additional_headers=headers) as ws:
            return json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))["type"]
    except websockets.InvalidStatus as refused:
        return refused.response.status_code


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "http://127.0.0.1.evil.example", "null", "http://localhost.evil.example:80"]
)
def test_a_websocket_from_a_foreign_origin_is_refused_at_the_handshake(transactional_db, server, origin):
    world = build_world()
    headers = ws_headers(server, cookies_for(world, "owner"), origin=origin)
    assert asyncio.run(_handshake(server, headers)) == 403


def test_a_websocket_without_an_origin_is_refused_and_one_from_the_site_is_accepted(transactional_db, server):
    world = build_world()
    headers = ws_headers(server, cookies_for(world, "owner"))
    assert asyncio.run(_handshake(server, headers)) == "hello"
    del headers["Origin"]
    assert asyncio.run(_handshake(server, headers)) == 403

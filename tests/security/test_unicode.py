"""Unicode edge cases on every transport: neither a crash (500, a dropped socket) nor corruption.

NUL cannot be stored in PostgreSQL's text and a lone surrogate cannot be encoded as UTF-8, so the
product must either refuse them with a clear 400 or store a sanitised text; the RTL override and
100 KB of emoji are ordinary text and must come back exactly as sent. Runs on the live Daphne server
with the simulated engine, as a browser or a program would reach it.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets

from accounts.models import User
from chat.models import Conversation, Message
from tests.security.authz_world import build_world
from tests.security.live_matrix import FRAME_DEADLINE, cookies_for, ws_headers
from tests.security.refusals import refused_clearly
from tests.support.sessions import CSRF, csrf_headers, with_csrf

# name -> (text, whether it must come back exactly as sent when accepted)
PAYLOADS = {
    "nul": ("before\x00after", False),
    "rtl_override": ("invoice\u202egnp.exe and \u2066isolated\u2069", True),
    "emoji_100kb": ("\U0001f600" * 25_000, True),  # 4 bytes each in UTF-8: 100 KB
    "lone_surrogate": ("half a pair: \ud800 and \udfff alone", False),
}
SHORT_PAYLOADS = {k: v for k, v in PAYLOADS.items() if k != "emoji_100kb"}


def _json(obj) -> bytes:
    """JSON with \\uXXXX escapes (ensure_ascii), as a program sends lone surrogates."""
    return json.dumps(obj).encode("ascii")


def _clean(text: str) -> bool:
    """Storable text: no NUL, no lone surrogate."""
    return "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@pytest.fixture
def owner_http(transactional_db, server):
    world = build_world()
    cookies = with_csrf(cookies_for(world, "owner"))
    headers = {**csrf_headers(server), "Content-Type": "application/json"}
    with httpx.Client(base_url=server.base_url, cookies=cookies, headers=headers, timeout=60) as http:
        yield world, http
    for message_id in Message.objects.filter(status__in=Message.ACTIVE_STATUSES).values_list("id", flat=True):
        http.post(f"/chat/api/messages/{message_id}/stop")


def _stored_or_refused(response: httpx.Response, text: str, exact: bool, stored: str | None) -> None:
    if response.status_code in (200, 201):
        assert stored is not None
        assert _clean(stored), repr(stored[:80])
        if exact:
            assert stored == text  # not a character lost or changed
        else:
            assert stored.replace("\ufffd", "") in (text.replace("\x00", ""), _strip_surrogates(text))
    else:
        refused_clearly(response, (400, 413))


def _strip_surrogates(text: str) -> str:
    return "".join(c for c in text if not 0xD800 <= ord(c) <= 0xDFFF)


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_conversation_title_over_json(owner_http, name):
    _world, http = owner_http
    text, exact = PAYLOADS[name]
    response = http.post("/chat/api/conversations", content=_json({"title": text}))
    stored = None
    if response.status_code == 201:
        stored = Conversation.objects.get(pk=response.json()["id"]).title
        exact = exact and len(text) <= 200  # a title is cut to its length, by design
        if not exact and stored == text[: len(stored)]:
            return
    _stored_or_refused(response, text, exact, stored)


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_message_sent_over_http_and_its_answer_over_sse(owner_http, name):
    world, http = owner_http
    text, exact = PAYLOADS[name]
    response = http.post("/chat/api/send", content=_json({"content": text, "conversation_id": world.conversation.pk}))
    stored = None
    if response.status_code == 201:
        turn = response.json()
        stored = Message.objects.get(pk=turn["user_message"]["id"]).content
        # The answer streams to its end over SSE (the runner did not crash on the question).
        with http.stream("GET", f"/chat/api/messages/{turn['assistant_message']['id']}/stream") as stream:
            assert stream.status_code == 200
            assert any(line == "event: done" for line in stream.iter_lines())
    _stored_or_refused(response, text, exact, stored)


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_message_sent_over_the_websocket(owner_http, server, name):
    world, http = owner_http
    text, exact = PAYLOADS[name]
    cookies = dict(http.cookies)

    async def exchange():
        async with websockets.connect(
            server.ws_url + "/ws/chat/", additional_headers=ws_headers(server, cookies)
        ) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))["type"] == "hello"
            frame = {"type": "send", "ref": "u", "content": text, "conversation_id": world.conversation.pk}
            await ws.send(json.dumps(frame))  # lone surrogates go as \\uXXXX escapes
            while True:
                reply = json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))
                if reply.get("ref") == "u" and reply["type"] in ("accepted", "error"):
                    break
            if reply["type"] == "accepted":
                # The socket is still alive and the answer ends.
                while True:
                    done = json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))
                    if done["type"] == "done" and done["message_id"] == reply["assistant_message"]["id"]:
                        break
            return reply

    reply = asyncio.run(exchange())
    if reply["type"] == "accepted":
        stored = Message.objects.get(pk=reply["user_message"]["id"]).content
        assert _clean(stored)
        if exact:
            assert stored == text
        else:
            assert stored in (text.replace("\x00", ""), _strip_surrogates(text))
    else:
        assert reply["status"] in (400, 413), reply
        assert reply["message"], reply


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_completion_over_the_api(owner_http, server, name):
    world, _ = owner_http
    text, _exact = PAYLOADS[name]
    response = httpx.post(
        server.base_url + "/v1/chat/completions",
        content=_json({"model": "sim-small", "messages": [{"role": "user", "content": text}], "max_tokens": 8}),
        headers={"Authorization": f"Bearer {world.api_key}", "Content-Type": "application/json"},
        timeout=60,
    )
    if response.status_code != 200:
        refused_clearly(response, (400, 413))
    else:
        assert response.json()["choices"][0]["message"]["content"] is not None


@pytest.mark.parametrize("name", SHORT_PAYLOADS)
def test_settings_and_key_names_over_a_form(owner_http, name):
    world, http = owner_http
    text, exact = PAYLOADS[name]
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    # A form cannot carry a lone surrogate (browsers send U+FFFD); NUL it can, as %00.
    encoded = text.encode("utf-8", "replace").decode("utf-8")
    saved = http.post(
        "/settings/",
        content=httpx.QueryParams(
            {"display_name": encoded, "theme": "system", "default_model": "", "custom_instructions": encoded}
        )
        .__str__()
        .encode(),
        headers={**form, "X-CSRFToken": CSRF},
    )
    assert saved.status_code in (303, 400), saved.status_code
    person = User.objects.get(pk=world.owner.pk)
    if saved.status_code == 303:
        assert _clean(person.display_name) and _clean(person.custom_instructions)
        if exact:
            assert person.custom_instructions == encoded
    else:
        assert "\x00" not in saved.text  # the page says why, and does not echo the NUL back
        assert person.custom_instructions == ""  # nothing half-saved

    key = http.post(
        "/accounts/api-keys/",
        content=str(httpx.QueryParams({"name": encoded})).encode(),
        headers={**form, "X-CSRFToken": CSRF},
    )
    assert key.status_code in (303, 400), key.status_code
    names = list(world.owner.api_keys.values_list("name", flat=True))
    assert all(_clean(n) for n in names), names


def test_a_search_with_a_nul_in_the_query_string(owner_http):
    _world, http = owner_http
    response = http.get("/chat/api/conversations", params={"q": "priv\x00ate"})
    refused_clearly(response, (400, 413))
    assert "NUL" in response.json()["error"]["message"]
    found = http.get("/chat/api/conversations", params={"q": "\u202eprivate \U0001f600"})
    assert found.status_code == 200

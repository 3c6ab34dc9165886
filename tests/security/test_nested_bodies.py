"""Deeply nested request data costs a clear 4xx, not the server's event loop or its memory.

One anonymous request of 2.5 MB (under the body limit, so nginx and Daphne let it through) of objects
nested hundreds deep, with keys thousands of characters long, used to take over a second of the event
loop and about a gigabyte of memory while the product looked for NUL characters in it (the key path of
every level was built as a new string), and JSON nested 5,000 deep was a 500. Here such bodies are
sent, anonymously and with valid credentials, to a real Daphne over every transport that reads JSON,
while another user keeps using the product: every attack gets a 4xx (or an error frame) with a
sentence, the process's peak memory barely moves, and every request of the other user is served.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import httpx
import pytest
import websockets
from django.conf import settings as django_settings

from accounts.api_keys import create_api_key
from tests.security.authz_world import build_world, make_person
from tests.security.live_matrix import FRAME_DEADLINE, cookies_for, ws_headers
from tests.support.plans import put_on_plan
from tests.support.servers import session_cookie_for, start_daphne

CSRF = "c" * 32
#: Under Python's recursion limit once Daphne's own stack is counted, so the JSON parses and what
#: comes after it is what is measured.
DEPTH = 600
#: Peak memory the whole attack may add to the server (it added about a gigabyte per request before).
MAX_PEAK_GROWTH_MB = 150
ROUNDS = 3


def _nested_objects_with_long_keys(size: int) -> bytes:
    key = "k" * (size // DEPTH - 6)
    return ('{"' + key + '":') * DEPTH + "1" + "}" * DEPTH


def _nested_objects_with_long_values(size: int) -> bytes:
    value = "v" * (size // DEPTH - 16)
    return ('{"v":"' + value + '","k":') * DEPTH + "1" + "}" * DEPTH


def _nested_lists_with_a_long_value(size: int) -> bytes:
    return "[" * DEPTH + '"' + "x" * (size - 2 * DEPTH - 2) + '"' + "]" * DEPTH


def _nested_lists_with_long_values(size: int) -> bytes:
    value = "y" * (size // DEPTH - 6)
    return ('["' + value + '",') * DEPTH + "0" + "]" * DEPTH


def _lists_5000_deep(size: int) -> str:
    return "[" * 5000 + "]" * 5000


SHAPES = [
    _nested_objects_with_long_keys,
    _nested_objects_with_long_values,
    _nested_lists_with_a_long_value,
    _nested_lists_with_long_values,
    _lists_5000_deep,
]


def _bodies(size: int) -> list[bytes]:
    bodies = [shape(size).encode() for shape in SHAPES]
    assert all(len(body) <= size for body in bodies)
    return bodies


def _peak_memory_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM), read from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def _refused_with_a_sentence(response: httpx.Response) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["message"] and len(error["message"]) < 500, error


@pytest.fixture(scope="module")
def gated_server(django_db_setup, django_db_blocker, engine):
    """Daphne with its loop-lag gate on, as deployed: while one request's parsing holds the loop up,
    everyone else is answered 503. At 400 ms rather than the default 250, so that a shared test
    machine's noise cannot trip it; these bodies tripped it at either before the fix."""
    server = start_daphne(engine_url=engine.url, extra_env={"WEB_MAX_LOOP_LAG_MS": "400"})
    yield server
    server.stop()


async def _frames_over_the_websocket(server, cookies: dict, frames: list[str]) -> list[dict]:
    replies = []
    async with websockets.connect(
        server.ws_url + "/ws/chat/", additional_headers=ws_headers(server, cookies), max_size=None
    ) as ws:
        assert json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))["type"] == "hello"
        for frame in frames:
            await ws.send(frame)
            replies.append(json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE)))
        # The socket is still open and still answers.
        await ws.send(json.dumps({"type": "no-such-type", "ref": "still-open"}))
        reply = json.loads(await asyncio.wait_for(ws.recv(), FRAME_DEADLINE))
        assert reply["ref"] == "still-open" and reply["status"] == 400, reply
    return replies


def test_nested_bodies_get_a_quick_4xx_and_cost_neither_memory_nor_other_users_service(transactional_db, gated_server):
    server = gated_server
    world = build_world()
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    bodies = _bodies(limit)
    frames = [body.decode() for body in _bodies(django_settings.WS_MAX_FRAME_BYTES)]
    owner_cookies = {**cookies_for(world, "owner"), "csrftoken": CSRF}
    chat_headers = {"X-CSRFToken": CSRF, "Referer": server.base_url + "/", "Content-Type": "application/json"}

    # Another user, with a session and an API key of their own; their ordinary requests once before the
    # baseline, so that what those load is not counted.
    bystander = make_person("bystander@example.com")
    put_on_plan(bystander, "plus")
    _, bystander_key = create_api_key(bystander, "script")
    other = httpx.Client(base_url=server.base_url, cookies=session_cookie_for(bystander), timeout=60)
    other_key = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {bystander_key}"}, timeout=60)
    assert other.get("/chat/api/conversations").status_code == 200
    assert other_key.get("/v1/models").status_code == 200
    small = {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    assert httpx.post(server.base_url + "/v1/chat/completions", json=small, timeout=60).status_code == 401
    baseline = _peak_memory_mb(server.process.pid)

    # (who, the status they must get, the response)
    attack_responses: list[tuple[str, int, httpx.Response]] = []
    failures: list[BaseException] = []

    def attack(who: str, expected: int, path: str, cookies: dict, headers: dict) -> None:
        try:
            with httpx.Client(base_url=server.base_url, cookies=cookies, headers=headers, timeout=120) as http:
                for _ in range(ROUNDS):
                    for body in bodies:
                        attack_responses.append((who, expected, http.post(path, content=body)))
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    json_headers = {"Content-Type": "application/json"}
    keyed = {**json_headers, "Authorization": f"Bearer {world.api_key}"}
    attackers = [
        # Anyone: refused for want of a key before the body is parsed.
        threading.Thread(target=attack, args=("anonymous /v1", 401, "/v1/chat/completions", {}, json_headers)),
        # A key holder and a signed-in user: refused as nested too deep.
        threading.Thread(target=attack, args=("a key on /v1", 400, "/v1/chat/completions", {}, keyed)),
        threading.Thread(target=attack, args=("the chat", 400, "/chat/api/send", owner_cookies, chat_headers)),
    ]
    for thread in attackers:
        thread.start()
    served = []
    while any(thread.is_alive() for thread in attackers):
        served.append(other.get("/chat/api/conversations"))
        served.append(other_key.get("/v1/models"))
    for thread in attackers:
        thread.join()
    replies = asyncio.run(_frames_over_the_websocket(server, owner_cookies, frames))
    other.close()
    other_key.close()

    assert not failures, failures
    assert len(attack_responses) == len(attackers) * ROUNDS * len(bodies)
    for who, expected, response in attack_responses:
        assert response.status_code == expected, (who, response.status_code, response.text[:300])
        _refused_with_a_sentence(response)
    for reply in replies:
        assert reply["type"] == "error" and 400 <= reply["status"] < 500 and reply["message"], reply
    # Every request of the other user was served while the attack ran: none waited for a 503.
    assert served and all(response.status_code == 200 for response in served), sorted(
        {response.status_code for response in served}
    )
    growth = _peak_memory_mb(server.process.pid) - baseline
    assert growth < MAX_PEAK_GROWTH_MB, f"the server's peak memory grew by {growth:.0f} MB"

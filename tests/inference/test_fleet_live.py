"""The fleet through a real Daphne: three simulated workers named in INFERENCE_NODES.

The poller (inference.health.poll_nodes) runs here, in the test process, when a test wants fresh
samples: it writes the nodes' health to the shared test database and their load to the shared Redis,
where the server's router reads them (its snapshot is at most INFERENCE_FLEET_REFRESH_SECONDS old).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket

import httpx
import pytest

from accounts.api_keys import create_api_key
from chat.models import Message
from inference import environment, fleet
from inference.health import poll_nodes
from inference.models import InferenceNode
from tests.chat.live import ChatClient, wait_until
from tests.support.engines import start_simulator
from tests.support.plans import put_on_plan
from tests.support.servers import start_daphne

pytestmark = pytest.mark.django_db(transaction=True)


def nodes_setting(workers: dict) -> str:
    return ",".join(f"{name}={worker.url}" for name, worker in workers.items())


@contextlib.contextmanager
def fleet_server(workers: dict, settings, **env):
    settings.INFERENCE_NODES = [f"{name}={worker.url}" for name, worker in workers.items()]
    environment.forget_sync()
    server = start_daphne(
        engine_url=next(iter(workers.values())).url,
        extra_env={
            "INFERENCE_NODES": nodes_setting(workers),
            "INFERENCE_FLEET_REFRESH_SECONDS": "0.2",
            "CHAT_HEARTBEAT_TTL_SECONDS": "2",
            **env,
        },
    )
    try:
        poll_nodes()
        yield server
    finally:
        server.stop()
        fleet.invalidate()


@pytest.fixture(scope="module")
def workers():
    started = {name: start_simulator("--enable-metrics", "--accept-any-model", speed="fast") for name in "abc"}
    yield started
    for worker in started.values():
        worker.stop()


def answer(chat: ChatClient, content: str, **fields) -> Message:
    sent = chat.send_ok(content, **fields)
    _, final, _ = chat.answer(sent["assistant_message"]["id"])
    assert final["status"] == "completed", final
    return Message.objects.get(pk=final["id"])


def test_a_conversation_stays_on_one_node_and_reuses_its_cached_prefix(workers, settings, user):
    put_on_plan(user, "plus")
    with fleet_server(workers, settings) as server:
        chat = ChatClient(server, user)
        first = answer(chat, "Tell me about the sea.")
        conversation = first.conversation_id
        later = [answer(chat, f"And then? ({turn})", conversation_id=conversation) for turn in range(3)]
        chat.close()
    turns = [first, *later]
    assert {m.node for m in turns} == {first.node} and first.node in workers
    for before, after in itertools.pairwise(turns):
        # The earlier turn's whole prompt is the start of the later one, and that node still holds it.
        assert after.cached_tokens >= before.prompt_tokens, (before.prompt_tokens, after.cached_tokens)


def test_conversations_spread_over_the_nodes(workers, settings, user):
    put_on_plan(user, "plus")
    with fleet_server(workers, settings) as server:
        chat = ChatClient(server, user)
        nodes = {answer(chat, f"Question {i}").node for i in range(12)}
        chat.close()
    assert len(nodes) >= 2


def test_a_node_that_is_down_takes_no_new_conversations(settings, user):
    put_on_plan(user, "plus")
    workers = {name: start_simulator("--accept-any-model", speed="fast") for name in ("up", "dying")}
    try:
        with fleet_server(workers, settings) as server:
            workers["dying"].kill()
            for _ in range(settings.INFERENCE_DOWN_AFTER):
                poll_nodes()
            assert InferenceNode.objects.get(name="dying").health == "down"
            chat = ChatClient(server, user)
            nodes = {answer(chat, f"Question {i}").node for i in range(6)}
            chat.close()
        assert nodes == {"up"}
    finally:
        for worker in workers.values():
            worker.stop()


def test_a_failure_before_the_first_token_is_retried_once_on_another_node(settings, user):
    put_on_plan(user, "plus")
    workers = {
        "good": start_simulator("--accept-any-model", speed="fast"),
        "bad": start_simulator(
            "--accept-any-model", "--fault-error-rate", "1.0", "--fault-error-status", "500", speed="fast"
        ),
    }
    try:
        # Round robin: of two answers, one is first sent to the failing node, whatever the hash would say.
        with fleet_server(workers, settings, INFERENCE_ROUTING="round_robin") as server:
            chat = ChatClient(server, user)
            answers = [answer(chat, f"Question {i}") for i in range(2)]
            chat.close()
        assert [m.node for m in answers] == ["good", "good"]
    finally:
        for worker in workers.values():
            worker.stop()


def test_a_draining_node_finishes_its_answer_and_takes_no_new_ones(settings, user):
    put_on_plan(user, "plus")
    workers = {name: start_simulator("--accept-any-model", speed="slow") for name in ("x", "y")}
    try:
        with fleet_server(workers, settings) as server:
            chat = ChatClient(server, user)
            running = chat.send_ok("Write me a long story.")
            message_id = running["assistant_message"]["id"]
            wait_until(lambda: Message.objects.get(pk=message_id).node, what="the answer to start on a node")
            draining = Message.objects.get(pk=message_id).node
            InferenceNode.objects.filter(name=draining).update(draining=True)
            # New conversations go elsewhere once the server's snapshot has the change...
            wait_until(
                lambda: answer(chat, "Another question").node != draining,
                timeout=30,
                what="new answers to avoid the draining node",
            )
            assert {answer(chat, f"Question {i}").node for i in range(4)} != {draining}
            # ... while the answer already on it runs to its end there.
            _, final, _ = chat.answer(message_id)
            chat.close()
        assert final["status"] == "completed"
        assert Message.objects.get(pk=message_id).node == draining
    finally:
        for worker in workers.values():
            worker.stop()


def test_when_every_node_is_busy_the_answer_waits_with_a_countdown_instead_of_failing(settings, user):
    put_on_plan(user, "free")
    busy = {
        "busy": start_simulator(
            "--accept-any-model", "--fault-error-rate", "1.0", "--fault-error-status", "503", speed="fast"
        )
    }
    try:
        with fleet_server(busy, settings) as server:
            chat = ChatClient(server, user)
            sent = chat.send_ok("Hello?")
            message_id = sent["assistant_message"]["id"]
            events = chat.events(message_id)
            first = next(events)
            assert first.kind == "busy" and first.data["retry_after"] >= 1 and "busy" in first.data["message"]
            assert Message.objects.get(pk=message_id).status in Message.ACTIVE_STATUSES
            stopped = chat.http.post(f"/chat/api/messages/{message_id}/stop")
            assert stopped.status_code in (200, 202), stopped.text
            rest = list(events)
            chat.close()
        assert rest[-1].kind == "done" and rest[-1].data["message"]["status"] == "stopped"
    finally:
        busy["busy"].stop()


def test_an_api_completion_on_busy_engines_is_503_with_retry_after(settings, user):
    put_on_plan(user, "plus")
    busy = {
        "busy": start_simulator(
            "--accept-any-model", "--fault-error-rate", "1.0", "--fault-error-status", "503", speed="fast"
        )
    }
    try:
        with fleet_server(busy, settings) as server:
            _, raw = create_api_key(user, name="test")
            response = httpx.post(
                f"{server.base_url}/v1/chat/completions",
                timeout=30,
                headers={"Authorization": f"Bearer {raw}"},
                json={"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]},
            )
        assert response.status_code == 503
        assert int(response.headers["Retry-After"]) >= 1
        assert response.json()["error"]["message"]
    finally:
        busy["busy"].stop()


#: An API caller's routing key as hostile as JSON lets it be (`user` is cut to 256 characters).
HOSTILE_USERS = ["line\nbreak", "carriage\r\nX-Injected: 1", "Grüße, 日本語, 🙂", "\u202eoverride", "x" * 10240]
#: And as a header: raw UTF-8 and other bytes past ASCII (Django reads them as latin-1), 10 KB, a tab.
HOSTILE_HEADERS = ["Grüße 日本語".encode(), b"\xff\xfe\x80", b"x" * 10240, b"tab\there"]


def raw_completion(server, api_key: str, conversation_key: bytes) -> bytes:
    """A completion with `conversation_key` as its X-Conversation-Key, written byte for byte; the reply."""
    host, port = server.base_url.removeprefix("http://").split(":")
    body = json.dumps({"model": "sim-small", "messages": [{"role": "user", "content": "Hello"}]}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(head + b"X-Conversation-Key: " + conversation_key + b"\r\n\r\n" + body)
        reply = b""
        while chunk := connection.recv(65536):
            reply += chunk
    return reply


def test_hostile_routing_keys_are_answered_and_leave_every_node_up(workers, settings, user):
    """The probe's attack: a newline in `user` went raw into a header every node request carried, the
    client could not send it, and each such request counted against the node until it was marked down."""
    put_on_plan(user, "plus")
    _, raw = create_api_key(user, name="test")
    messages = [{"role": "user", "content": "Hello"}]
    with fleet_server(workers, settings) as server:
        api = httpx.Client(base_url=server.base_url, timeout=30, headers={"Authorization": f"Bearer {raw}"})

        def answered(response: httpx.Response) -> None:
            assert response.status_code == 200, response.text
            assert response.json()["choices"][0]["message"]["content"]

        # More requests in a row than it takes to mark a node down, on whichever node each key hashes to.
        for _ in range(settings.INFERENCE_DOWN_AFTER):
            for value in HOSTILE_USERS:
                answered(
                    api.post("/v1/chat/completions", json={"model": "sim-small", "messages": messages, "user": value})
                )
            for value in HOSTILE_HEADERS:
                body = {"model": "sim-small", "messages": messages}
                answered(api.post("/v1/chat/completions", json=body, headers={"X-Conversation-Key": value}))
        body = {"model": "sim-small", "messages": messages, "user": "line\nbreak", "stream": True}
        with api.stream("POST", "/v1/chat/completions", json=body) as streamed:
            assert streamed.status_code == 200
            assert streamed.read().decode().rstrip().endswith("data: [DONE]")
        # A NUL is not text anyone can store: refused before anything is routed, naming the field.
        refused = api.post("/v1/chat/completions", json={"model": "sim-small", "messages": messages, "user": "a\x00b"})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "user"
        # What httpx will not send in a header, written on the socket: Daphne refuses a NUL or a lone CR
        # itself (400); a folded header line and a DEL reach the product and are answered.
        for value, status in [(b"a\x00b", 400), (b"a\rb", 400), (b"folded\r\n line", 200), (b"del\x7f", 200)]:
            for _ in range(settings.INFERENCE_DOWN_AFTER):
                assert raw_completion(server, raw, value).startswith(f"HTTP/1.1 {status} ".encode())
        api.close()
        fleet.invalidate()
        assert {view.name: view.health for view in fleet.snapshot()} == dict.fromkeys(workers, "up")
    assert set(InferenceNode.objects.values_list("health", flat=True)) == {"up"}

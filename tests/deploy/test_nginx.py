"""Two Daphne processes behind a real nginx running the product's own proxy rules (deploy/nginx/).

What must hold for Daphne processes to be interchangeable behind a proxy: an answer started through
one process streams, resumes (Last-Event-ID) and is watched over a WebSocket through the other; a
stop sent through either process reaches the runner, which lives in the process that started the
answer; round robin over both serves whole answers; no process answering is the product's 503 with
Retry-After; a client cannot pick the address the rate limits see.

Which process serves a request is decided, not left to round robin: nginx listens on one port per
upstream group (`a`: only process A, `b`: only process B, `both`: A and B in round robin, the
deployed shape; `gone`: a port where nothing listens), and every response names the process that
served it in X-SGLChat-Upstream (tests/support/nginx.py).
"""

import asyncio
import contextlib
import json
import uuid

import httpx
import pytest
import websockets

from chat.models import Conversation, Message
from harness.engines import free_port, start_simulator
from tests.chat.conftest import _settle_down
from tests.chat.live import ChatClient, attach_and_read, engine_running, wait_until
from tests.chat.test_live_streaming import LONG
from tests.support.live_fixtures import ENGINE_ARGS, HEARTBEAT_TTL
from tests.support.nginx import UPSTREAM_HEADER, start_nginx
from tests.support.servers import start_daphne

# The Daphne processes are other processes: they see committed rows only, and the test database must
# exist even when the only test run is one that creates no rows.
pytestmark = pytest.mark.django_db(transaction=True)


def _address(server) -> str:
    return server.base_url.removeprefix("http://")


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory):
    """An engine of this module's own (so its request count is this module's), two Daphne processes
    run as deployed (--proxy-headers), and nginx in front of them."""
    root = tmp_path_factory.mktemp("nginx-stack")
    env = {"CHAT_HEARTBEAT_TTL_SECONDS": HEARTBEAT_TTL}
    # Whatever started is stopped, also when a later start fails (nginx missing): no orphan servers
    # holding the test database open.
    with contextlib.ExitStack() as started:
        engine = start_simulator(*ENGINE_ARGS)
        started.callback(engine.stop)
        a = start_daphne(engine_url=engine.url, extra_env=env, args=["--proxy-headers"], log_dir=root)
        started.callback(a.stop)
        b = start_daphne(engine_url=engine.url, extra_env=env, args=["--proxy-headers"], log_dir=root)
        started.callback(b.stop)
        nginx = start_nginx(
            root / "nginx",
            {
                "a": [_address(a)],
                "b": [_address(b)],
                "both": [_address(a), _address(b)],
                "gone": [f"127.0.0.1:{free_port()}"],
            },
        )
        started.callback(nginx.stop)
        yield {"engine": engine, "a": a, "b": b, "nginx": nginx}


def _quiet(client: ChatClient) -> None:
    """Every answer ended, and the work each new conversation's first completed answer starts (its title,
    written by chat.tasks.after_answer in the server) done too: the test database is flushed next, and a server
    still writing a title meanwhile deadlocks the flush (seen in CI)."""
    _settle_down(client)
    wait_until(
        lambda: (
            not Conversation.objects.filter(
                title="", messages__role=Message.Role.ASSISTANT, messages__status=Message.Status.COMPLETED
            ).exists()
        ),
        what="every new conversation's title to be written",
    )


@pytest.fixture
def browser(stack, user):
    """One signed-in browser session, reaching process A through nginx's port `a` and process B
    through port `b` with the same cookies."""
    through_a = ChatClient(stack["nginx"]["a"], user)
    through_b = ChatClient(stack["nginx"]["b"], cookies=through_a.cookies)
    yield through_a, through_b
    _quiet(through_a)
    through_a.close()
    through_b.close()


def _served_by(headers) -> str:
    return httpx.Headers(headers)[UPSTREAM_HEADER]


def test_an_answer_started_through_one_process_resumes_through_the_other_with_last_event_id(stack, browser):
    through_a, through_b = browser
    sent = through_a.send(LONG)
    assert sent.status_code == 201, sent.text
    assert _served_by(sent.headers) == _address(stack["a"])
    assistant = sent.json()["assistant_message"]

    first_headers, rest_headers = {}, {}
    first = list(through_a.events(assistant["id"], limit=3, response_headers=first_headers))
    assert [e.kind for e in first] == ["delta"] * 3
    assert Message.objects.get(pk=assistant["id"]).status in Message.ACTIVE_STATUSES  # it streamed, unbuffered
    rest_text, final, rest = through_b.answer(
        assistant["id"], last_event_id=first[-1].id, response_headers=rest_headers
    )

    assert _served_by(first_headers) == _address(stack["a"])
    assert _served_by(rest_headers) == _address(stack["b"])
    assert final["status"] == "completed"
    resumed = "".join(e.data["text"] for e in first) + rest_text
    assert resumed == final["content"] == Message.objects.get(pk=assistant["id"]).content
    assert not {e.id for e in first} & {e.id for e in rest}  # every frame exactly once
    # Each process's own log shows its part: A took the send, B the resumed stream.
    stream = f"/chat/api/messages/{assistant['id']}/stream"
    assert "POST /chat/api/send" in stack["a"].log()
    wait_until(lambda: stream in stack["b"].log(), what="process B to log the resumed stream")


def test_the_chat_pages_send_streams_its_answer_through_the_proxy_and_resumes_through_the_other(stack, browser):
    through_a, through_b = browser
    headers: dict = {}
    first = through_a.send_streaming(LONG, limit=4, response_headers=headers)

    assert _served_by(headers) == _address(stack["a"])
    assert [e.kind for e in first] == ["turn", "delta", "delta", "delta"]
    answer_id = first[0].data["assistant_message"]["id"]
    assert Message.objects.get(pk=answer_id).status in Message.ACTIVE_STATUSES  # it streamed, unbuffered
    rest_text, final, rest = through_b.answer(answer_id, last_event_id=first[-1].id)

    assert final["status"] == "completed"
    assert "".join(e.data["text"] for e in first[1:]) + rest_text == final["content"]
    assert not {e.id for e in first} & {e.id for e in rest}


@pytest.mark.parametrize("stop_through", ["a", "b"])
def test_a_stop_sent_through_either_process_reaches_the_runner(stack, browser, stop_through):
    through_a, through_b = browser
    engine = stack["engine"]
    sent = through_a.send(LONG)
    assert sent.status_code == 201, sent.text
    assert _served_by(sent.headers) == _address(stack["a"])  # the runner lives in process A
    assistant = sent.json()["assistant_message"]
    seen = list(through_a.events(assistant["id"], limit=3))
    assert engine_running(engine.url) >= 1

    stopper = through_a if stop_through == "a" else through_b
    stopped = stopper.http.post(f"/chat/api/messages/{assistant['id']}/stop")
    assert stopped.status_code in {200, 202}, stopped.text
    assert _served_by(stopped.headers) == _address(stack[stop_through])

    text, final, _ = through_b.answer(assistant["id"], last_event_id=seen[-1].id)
    assert final["status"] == "stopped"
    wait_until(lambda: engine_running(engine.url) == 0, what="the engine to drop the aborted request")
    saved = Message.objects.get(pk=assistant["id"])
    assert saved.status == "stopped"
    assert saved.content == "".join(e.data["text"] for e in seen) + text


def test_a_websocket_through_the_proxy_follows_an_answer_another_process_runs(stack, browser):
    through_a, through_b = browser
    assistant = through_a.send_ok(LONG)["assistant_message"]
    list(through_a.events(assistant["id"], limit=2))  # under way, in process A

    async def attach():
        url = stack["nginx"]["b"].ws_url + "/ws/chat/"
        async with websockets.connect(url, additional_headers=through_b.ws_headers()) as ws:
            assert ws.response.headers[UPSTREAM_HEADER] == _address(stack["b"])  # upgraded through nginx
            assert json.loads(await ws.recv())["type"] == "hello"
            return await attach_and_read(ws, assistant["id"])

    deltas, done = asyncio.run(attach())
    assert done["message"]["status"] == "completed"
    assert "".join(d["text"] for d in deltas) == done["message"]["content"]
    assert len({d["id"] for d in deltas}) == len(deltas)


def test_round_robin_over_both_processes_serves_whole_answers(stack, user):
    both = stack["nginx"]["both"]
    # One nginx worker, no failures: round robin alternates strictly, so two requests reach both.
    served = {_served_by(httpx.get(f"{both.base_url}/healthz", timeout=10).headers) for _ in range(2)}
    assert served == {_address(stack["a"]), _address(stack["b"])}

    chat = ChatClient(both, user)
    try:
        for question in ("Tell me about tides.", "And about harbours?"):
            assistant = chat.send_ok(question)["assistant_message"]
            text, final, _ = chat.answer(assistant["id"])
            assert final["status"] == "completed" and text == final["content"]
    finally:
        _quiet(chat)
        chat.close()


def test_no_process_answering_is_the_products_busy_503_with_retry_after(stack):
    response = httpx.get(f"{stack['nginx']['gone'].base_url}/chat/api/conversations", timeout=10)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    error = response.json()["error"]
    assert error["code"] == "busy" and error["retry_after"] == 5 and "Try again" in error["message"]


def test_metrics_are_not_served_through_the_public_entrance(stack):
    response = httpx.get(f"{stack['nginx']['a'].base_url}/metrics", timeout=10)
    assert response.status_code == 404


def test_a_client_cannot_choose_the_address_the_product_sees(stack):
    probe = f"/no-such-page-{uuid.uuid4().hex}"
    response = httpx.get(
        f"{stack['nginx']['a'].base_url}{probe}", headers={"X-Forwarded-For": "203.0.113.9"}, timeout=10
    )
    assert response.status_code == 404

    line = wait_until(
        lambda: next((li for li in stack["a"].log().splitlines() if f'"GET {probe}"' in li), None),
        what="process A's access log to show the probe",
    )
    # Daphne (--proxy-headers) logs the client address it took from nginx: the test's own, never the
    # one the client wrote.
    assert line.startswith("127.0.0.1:"), line
    assert "203.0.113.9" not in line

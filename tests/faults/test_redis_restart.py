"""Redis restarts (and comes back empty), or drops a connection, in the middle of an answer. The shared
Redis on 6379 serves every other test on this machine, so these tests start a Redis of their own on a
free port and break that one: the product (Daphne, and this process playing Celery beat) is pointed at it."""

import contextlib

import pytest
import redis
from asgiref.sync import async_to_sync

from chat.generation.streams import STOP_CHANNEL, RedisStreams
from tests.faults.invariants import assert_invariants
from tests.faults.support import first_events, saved, send_accepted
from tests.support.engines import LOOPBACK, ManagedProcess, free_port
from tests.support.waiting import wait_until


def start_redis(port: int, log_dir) -> ManagedProcess:
    """A throwaway redis-server that keeps nothing on disk (so a restart comes back empty)."""
    argv = ["redis-server", "--bind", LOOPBACK, "--port", str(port), "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(log_dir)]
    server = ManagedProcess("redis", argv, f"redis://{LOOPBACK}:{port}/0")
    server.wait_until(lambda: _answers(port), timeout=20, what="answering PING")
    return server


def _answers(port: int) -> bool:
    with contextlib.suppress(redis.RedisError, OSError):
        return redis.Redis(host=LOOPBACK, port=port, socket_timeout=1).ping()
    return False


@pytest.fixture
def private_redis(settings, tmp_path):
    port = free_port()
    holder = {"redis": start_redis(port, tmp_path)}
    settings.REDIS_URL = holder["redis"].url  # this process's quota store and reaper use it too

    def restart() -> None:
        holder["redis"].kill()  # a crash: nothing saved, every connection reset (the process is reaped)
        holder["redis"] = start_redis(port, tmp_path)

    yield holder["redis"].url, restart
    holder["redis"].stop()


def test_a_redis_restart_mid_answer_keeps_the_answer_and_the_product_recovers_without_a_restart(
    stack, pro_user, accepted, private_redis
):
    redis_url, restart = private_redis
    engine = stack.engine()
    server = stack.server(engine.url, REDIS_URL=redis_url)
    chat = stack.client(server, pro_user)
    answer_id = send_accepted(chat, accepted)["assistant_message"]["id"]
    first_events(chat, answer_id)

    restart()

    answer = wait_until(
        lambda: (m := saved(answer_id)).status not in ("pending", "streaming") and m,
        timeout=60,
        what="the answer to end",
    )
    # It finished, or it failed with the text it had; either way with its text.
    assert answer.status in ("completed", "failed"), (answer.status, answer.error)
    assert answer.content
    # A reader arriving now gets the saved answer exactly, though Redis lost the start of its stream.
    text, final, _ = chat.answer(answer_id)
    assert final["status"] == answer.status
    assert text == answer.content

    # The same server, never restarted, serves a new answer from start to end over the new Redis.
    response = wait_until(
        lambda: (r := chat.send("Still there?")).status_code == 201 and r, what="a send to be accepted again"
    )
    turn = accepted.add(response.json(), "Still there?")
    text, final, _ = chat.answer(turn["assistant_message"]["id"])
    assert final["status"] == "completed" and text == saved(turn["assistant_message"]["id"]).content

    # Redis lost the quota counter with everything else: it is rebuilt from the ledger, never guessed.
    assert_invariants([pro_user], accepted, counters_may_be_lost=True)


def test_a_stop_requested_while_the_servers_stop_listener_had_lost_its_connection_still_stops_the_answer(
    stack, pro_user, accepted, private_redis
):
    """A stop is broadcast only to the listeners subscribed when it is sent (and flagged for the rest):
    a server whose listener's connection was reset listens again, and finds the stop it did not hear."""
    redis_url, _ = private_redis
    # Long enough that an answer nobody stops is still being written long after the stop.
    engine = stack.engine("--min-answer-tokens", "3000", "--max-answer-tokens", "3000")
    server = stack.server(engine.url, REDIS_URL=redis_url)
    chat = stack.client(server, pro_user)
    answer_id = send_accepted(chat, accepted)["assistant_message"]["id"]
    first_events(chat, answer_id)
    admin = redis.Redis.from_url(redis_url)
    wait_until(lambda: admin.pubsub_numsub(STOP_CHANNEL)[0][1] == 1, what="the server's stop listener to be subscribed")

    admin.client_kill_filter(_type="pubsub")  # its connection reset, as a proxy or a failover does
    # The Stop reaching another server process (chat.generation.actions.stop there, or a suspension).
    async_to_sync(RedisStreams(redis_url).request_stop)(answer_id)

    answer = wait_until(
        lambda: (m := saved(answer_id)).status not in ("pending", "streaming") and m,
        timeout=120,
        what="the answer to end",
    )
    assert answer.status == "stopped", (answer.status, answer.error)
    assert answer.content  # what was written before the stop is kept
    assert_invariants([pro_user], accepted)

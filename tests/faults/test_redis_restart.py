"""Redis restarts (and comes back empty), or drops a connection, in the middle of an answer. The shared
Redis on 6379 serves every other test on this machine, so these tests start a Redis of their own on a
free port and break that one: the product (Daphne, and this process playing Celery beat) is pointed at it."""

import asyncio
import contextlib

import pytest
import redis
from asgiref.sync import async_to_sync

from billing.models import UsageRecord
from chat.generation.streams import FINISHED_TTL_SECONDS, STOP_CHANNEL, RedisStreams, _stop_key
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


#: Answers long enough (about a minute) that one still running at its end was never stopped.
ANSWER_TOKENS = 3000
LONG = ("--min-answer-tokens", str(ANSWER_TOKENS), "--max-answer-tokens", str(ANSWER_TOKENS))


def _ended(answer_id: int):
    return wait_until(
        lambda: (m := saved(answer_id)).status not in ("pending", "streaming") and m,
        timeout=120,
        what=f"answer {answer_id} to end",
    )


def _assert_stopped_and_billed_for_what_it_wrote(answer_id: int) -> None:
    answer = _ended(answer_id)
    assert answer.status == "stopped", (answer.status, answer.error, len(answer.content))
    assert answer.content
    row = UsageRecord.objects.get(generation_id=str(answer_id))
    # The engine's own count of what it produced before the abort, not the whole answer's.
    assert row.completion_tokens == answer.completion_tokens
    assert 0 < row.completion_tokens < ANSWER_TOKENS


def _stop_listeners(control: redis.Redis) -> set[int]:
    """The ids of the connections subscribed on this Redis (only Daphne's stop listener subscribes here)."""
    return {int(client["id"]) for client in control.client_list(_type="pubsub")}


def test_a_stop_sent_through_another_process_after_a_redis_restart_ends_the_answer_stopped(
    stack, pro_user, accepted, private_redis
):
    """The runner is in Daphne; the stop comes from elsewhere (this process), as `actions.stop` sends
    one for an answer another process runs: the flag and the broadcast. Redis restarted just before, so
    the listener's subscription is gone: the answer must still stop within seconds, with its text."""
    redis_url, restart = private_redis
    engine = stack.engine(*LONG)
    server = stack.server(engine.url, REDIS_URL=redis_url)
    chat = stack.client(server, pro_user)
    answer_id = send_accepted(chat, accepted)["assistant_message"]["id"]
    first_events(chat, answer_id)

    restart()
    asyncio.run(RedisStreams(redis_url).request_stop(answer_id))

    _assert_stopped_and_billed_for_what_it_wrote(answer_id)
    assert_invariants([pro_user], accepted, counters_may_be_lost=True)


def test_the_stop_listener_comes_back_after_its_connection_is_cut_and_hears_the_next_broadcast(
    stack, pro_user, accepted, private_redis
):
    """Cut only the stop listener's connection (CLIENT KILL), wait for it to subscribe again on a new
    one, then send the broadcast alone (no flag, which the heartbeat would also read): only a listener
    that came back can stop the answer. It was started before the cut, so no new answer restarts it."""
    redis_url, _ = private_redis
    engine = stack.engine(*LONG)
    server = stack.server(engine.url, REDIS_URL=redis_url)
    chat = stack.client(server, pro_user)
    answer_id = send_accepted(chat, accepted)["assistant_message"]["id"]
    first_events(chat, answer_id)
    control = redis.Redis.from_url(redis_url)
    before = wait_until(lambda: _stop_listeners(control), what="the stop listener to subscribe")

    assert control.client_kill_filter(_type="pubsub") == len(before)
    wait_until(lambda: _stop_listeners(control) - before, timeout=30, what="the stop listener to subscribe again")
    control.publish(STOP_CHANNEL, str(answer_id))

    _assert_stopped_and_billed_for_what_it_wrote(answer_id)
    assert_invariants([pro_user], accepted)
    control.close()


def test_a_stop_whose_broadcast_nobody_heard_is_honoured_at_the_next_heartbeat(
    stack, pro_user, accepted, private_redis
):
    """What the heartbeat is for while the listener subscribes again: the stop's flag alone (as
    `request_stop` leaves it when its broadcast reached no one) ends the answer `stopped`."""
    redis_url, _ = private_redis
    engine = stack.engine(*LONG)
    server = stack.server(engine.url, REDIS_URL=redis_url)
    chat = stack.client(server, pro_user)
    answer_id = send_accepted(chat, accepted)["assistant_message"]["id"]
    first_events(chat, answer_id)

    control = redis.Redis.from_url(redis_url)
    control.set(_stop_key(answer_id), 1, ex=FINISHED_TTL_SECONDS)
    control.close()

    _assert_stopped_and_billed_for_what_it_wrote(answer_id)


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

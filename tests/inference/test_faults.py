"""Each fault the simulator can inject surfaces in the client as the right typed error.

No test measures how long anything took (machines are noisy). Which deadline ended a request is the
phase its error names; that it ended the request before the engine answered is the error itself (an
answer would have come instead); and that it did not fire before it was due is shown by what the same
deadlines let through: an engine that answers within them, tokens that keep coming, the text that
arrived before a total deadline cut the answer.
"""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from harness.engines import free_port, get_load, start_simulator
from inference.client import GenerationRequest, SGLangClient, Timeouts
from inference.errors import EngineInternalError, EngineOverloaded, EngineTimeout, EngineUnavailable
from tests.inference.helpers import LONG_ANSWER_ARGS, chat, collect, until

MESSAGES = chat("Tell me about the garden.")


def request(**overrides) -> GenerationRequest:
    return GenerationRequest(**{"messages": MESSAGES, "max_new_tokens": 200, "temperature": 0, **overrides})


async def test_extra_latency_beyond_the_first_token_deadline_is_a_first_token_timeout():
    with start_simulator("--fault-latency", "4") as slow:
        async with SGLangClient(slow.url, timeouts=Timeouts(first_token=0.5)) as impatient:
            with pytest.raises(EngineTimeout) as refused:
                await collect(impatient, request())
        assert refused.value.phase == "first_token"
        # Within the deadline the same latency is no error at all: the deadline waits for what is due.
        async with SGLangClient(slow.url, timeouts=Timeouts(first_token=30)) as patient:
            result = await collect(patient, request(max_new_tokens=5))
        assert result.finish_reason == "length"


@pytest.mark.parametrize("mode", ["native", "openai"])
async def test_error_rate_surfaces_as_internal_errors_streamed_or_not(mode):
    with start_simulator("--fault-error-rate", "1.0") as failing:
        async with SGLangClient(failing.url, mode=mode) as client:
            with pytest.raises(EngineInternalError) as streamed:
                await collect(client, request())
            with pytest.raises(EngineInternalError) as whole:
                await client.generate(request())
    assert streamed.value.status_code == whole.value.status_code == 500
    assert "Injected failure" in streamed.value.detail
    assert streamed.value.user_message  # something to show the user


async def test_an_injected_503_is_overload():
    with start_simulator("--fault-error-rate", "1.0", "--fault-error-status", "503") as busy:
        async with SGLangClient(busy.url) as client:
            with pytest.raises(EngineOverloaded):
                await collect(client, request())
            with pytest.raises(EngineOverloaded):
                await client.generate(request())


async def test_a_partial_error_rate_fails_some_requests_and_not_others():
    with start_simulator("--fault-error-rate", "0.5", "--random-seed", "3") as flaky:
        async with SGLangClient(flaky.url) as client:
            outcomes = []
            for _ in range(12):
                try:
                    await collect(client, request(max_new_tokens=3))
                    outcomes.append("ok")
                except EngineInternalError:
                    outcomes.append("failed")
    assert {"ok", "failed"} <= set(outcomes)


async def test_a_full_queue_is_overload():
    with start_simulator(
        "--max-running-requests",
        "1",
        "--max-queued-requests",
        "1",
        *LONG_ANSWER_ARGS,
    ) as small:
        async with SGLangClient(small.url) as client:
            # One at a time: a request that arrives before the first was admitted would find the queue full.
            tasks = [asyncio.create_task(collect(client, request(max_new_tokens=1000)))]
            await until(
                lambda: get_load(small.url)["num_reqs"] == 1 and get_load(small.url)["num_waiting_reqs"] == 0,
                what="the first request running",
            )
            tasks.append(asyncio.create_task(collect(client, request(max_new_tokens=1000))))
            await until(lambda: get_load(small.url)["num_waiting_reqs"] == 1, what="one running and one queued")
            with pytest.raises(EngineOverloaded) as refused:
                await collect(client, request())
            assert refused.value.status_code == 503
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_an_engine_that_dies_mid_stream_is_unavailable():
    worker = start_simulator("--fault-die-after-tokens", "5")
    try:
        async with SGLangClient(worker.url) as client:
            events = []
            with pytest.raises(EngineUnavailable):
                async for event in client.generate_stream(request()):
                    events.append(event)
            assert 1 <= len(events) <= 5 and all(e.text for e in events)  # the text before the crash arrived
            assert worker.proc.wait(10) != 0
            # Nothing listens any more: connection refused is unavailability too, and health says so.
            with pytest.raises(EngineUnavailable):
                await collect(client, request())
            assert await client.health() is False
    finally:
        worker.stop()


async def test_an_engine_that_hangs_before_the_first_token_times_out():
    with start_simulator("--fault-hang", env={"SGLANG_HEALTH_CHECK_TIMEOUT": "1"}, wait_healthy=False) as hung:
        async with SGLangClient(hung.url, timeouts=Timeouts(first_token=0.5)) as client:
            with pytest.raises(EngineTimeout) as refused:
                await collect(client, request())
            assert refused.value.phase == "first_token"
            # SGLang's /health runs a generation probe: a hung engine fails it.
            assert await client.health() is False


async def test_an_engine_that_hangs_mid_answer_times_out_between_tokens():
    with start_simulator("--fault-hang-after-tokens", "4") as hung:
        async with SGLangClient(hung.url, timeouts=Timeouts(first_token=10, between_tokens=0.5)) as client:
            # While tokens keep coming the deadline between them never fires: an answer shorter than the
            # hang point ends as usual under the same deadlines.
            short = await collect(client, request(max_new_tokens=3))
            assert short.finish_reason == "length" and short.text
            events = []

            async def consume():
                async for event in client.generate_stream(request()):
                    events.append(event)

            with pytest.raises(EngineTimeout) as refused:
                await consume()
    assert refused.value.phase == "between_tokens"
    assert "".join(e.text for e in events)  # the tokens before the hang were delivered


async def test_a_total_deadline_bounds_the_whole_generation():
    with start_simulator(*LONG_ANSWER_ARGS) as slow:
        async with SGLangClient(slow.url, timeouts=Timeouts(total=0.5)) as client:
            events = []

            async def consume():
                async for event in client.generate_stream(request(max_new_tokens=1000)):
                    events.append(event)

            with pytest.raises(EngineTimeout) as refused:
                await consume()
        assert refused.value.phase == "total"
        # It let the answer run until it was due (text arrived before it), and then cut it: the answer
        # never reached its own end (its 1,000 tokens would have ended with a finish).
        assert "".join(e.text for e in events)
        assert not any(e.finish_reason for e in events)
        await until(lambda: get_load(slow.url)["num_reqs"] == 0, what="the timed-out request to be aborted")


async def test_nothing_listening_is_unavailable():
    async with SGLangClient(f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(EngineUnavailable):
            await collect(client, request())
        assert await client.health() is False


async def test_a_connection_that_is_never_accepted_is_a_connect_timeout():
    """A listener whose accept queue is full drops new SYNs: the connect phase times out."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    try:
        for _ in range(8):  # fill the accept queue (never accepted)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(listener.getsockname())
            fillers.append(s)
        await asyncio.sleep(0.05)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        async with SGLangClient(url, timeouts=Timeouts(connect=0.5, first_token=30)) as client:
            with pytest.raises(EngineTimeout) as refused:
                await collect(client, request())
        # The connect phase's deadline, not the first token's (which would have fired much later).
        assert refused.value.phase == "connect"
    finally:
        for s in fillers:
            s.close()
        listener.close()


async def test_a_full_queue_with_priority_scheduling_cuts_the_least_important_waiting_request():
    with start_simulator(
        "--max-running-requests",
        "1",
        "--max-queued-requests",
        "1",
        *LONG_ANSWER_ARGS,
        "--enable-priority-scheduling",
    ) as small:
        async with SGLangClient(small.url) as client:
            running = asyncio.create_task(collect(client, request(max_new_tokens=1000, priority=0)))
            await until(lambda: get_load(small.url)["num_reqs"] == 1, what="the first request running")
            free = asyncio.create_task(collect(client, request(max_new_tokens=1000, priority=0)))
            await until(lambda: get_load(small.url)["num_waiting_reqs"] == 1, what="a free request queued")
            # An equal arrival is refused; a more important one takes the free request's place.
            with pytest.raises(EngineOverloaded, match="queue is full"):
                await collect(client, request(priority=0))
            premium = asyncio.create_task(collect(client, request(max_new_tokens=1000, priority=10)))
            with pytest.raises(EngineOverloaded, match="aborted by a higher priority request") as cut:
                await free
            assert cut.value.status_code == 503
            assert get_load(small.url)["num_waiting_reqs"] == 1  # the premium request, waiting its turn
            for task in (running, premium):
                task.cancel()
            await asyncio.gather(running, premium, return_exceptions=True)


async def test_a_degraded_version_says_so_fails_often_and_misses_its_references():
    """--degraded: the labelled bad version a rollout test deploys beside a healthy one."""
    said = "The keeper trims the wick at dusk."
    with start_simulator("--echo", "--degraded", "--speed", "instant") as bad:
        async with httpx.AsyncClient() as http:
            info = (await http.get(f"{bad.url}/server_info", timeout=5)).json()
        assert info["simulated_degraded"] is True and "DEGRADED (a simulated bad version)" in info["faults"]
        failed, answers = 0, []
        async with SGLangClient(bad.url) as client:
            for _ in range(12):
                try:
                    answers.append((await collect(client, request(messages=chat(said)))).text)
                except EngineInternalError:
                    failed += 1
    assert 0 < failed < 12  # a share of its requests fail (30% by default, from a seeded generator)
    assert answers and set(answers) == {"The keeper trims the wick at"}  # an echo that misses its last word

"""The benchmark harness's own rules (bench/): what it refuses to wipe, how it counts, what it calls lost.

No timings here: speed is measured by `make bench`, never asserted in tests.
"""

import asyncio
from dataclasses import asdict, replace

import pytest

from bench import abuse, data, doc, levers, matrix, profiling, relay, report
from bench import routing as routing_bench
from bench.load import Sample
from billing.models import UsageRecord
from chat.models import Conversation, Message
from harness.engines import start_simulator


def test_the_bench_refuses_to_wipe_a_database_or_redis_that_is_not_its_own():
    with pytest.raises(SystemExit, match="must contain 'bench'"):
        data.check_safe("postgres://postgres@127.0.0.1:5432/sglchat", "redis://127.0.0.1:6379/9")
    with pytest.raises(SystemExit, match="numbered database"):
        data.check_safe("postgres://postgres@127.0.0.1:5432/sglchat_bench", "redis://127.0.0.1:6379/0")
    with pytest.raises(SystemExit, match="numbered database"):
        data.check_safe("postgres://postgres@127.0.0.1:5432/sglchat_bench", "redis://127.0.0.1:6379")
    data.check_safe("postgres://postgres@127.0.0.1:5432/sglchat_bench", "redis://127.0.0.1:6379/9")


def _turn(user, *, status="completed", ledger_rows=1, content="Hello"):
    conversation = Conversation.objects.create(owner=user, model="sim-small")
    question = Message.objects.create(conversation=conversation, role="user", content=content)
    answer = Message.objects.create(conversation=conversation, role="assistant", parent=question, status=status)
    for i in range(ledger_rows):
        UsageRecord.objects.create(
            user=user,
            reservation_id=f"r{answer.pk}-{i}",
            generation_id=f"g{answer.pk}-{i}",
            conversation_id=conversation.pk,
            plan_slug="free",
            model="sim-small",
            prompt_tokens=5,
            completion_tokens=3,
            billable_tokens=8,
        )
    return {
        "user_message_id": question.pk,
        "assistant_message_id": answer.pk,
        "conversation_id": conversation.pk,
        "content": content,
    }


def test_an_accepted_send_counts_as_lost_unless_stored_finished_and_billed_once(user):
    good = _turn(user)
    assert data.check_losses([good])["lost"] == 0

    unfinished = _turn(user, status="streaming")
    unbilled = _turn(user, ledger_rows=0)
    billed_twice = _turn(user, ledger_rows=2)
    changed = _turn(user)
    changed["content"] = "what the user typed"
    missing = {**_turn(user), "user_message_id": 10**12}
    losses = data.check_losses([good, unfinished, unbilled, billed_twice, changed, missing])
    assert losses["answers_not_final"] == 1
    assert losses["answers_without_ledger_row"] == 1
    assert losses["extra_ledger_rows"] == 1
    assert losses["user_messages_changed"] == 1
    assert losses["user_messages_missing"] == 1
    assert losses["lost"] == 5
    assert losses["answers_by_status"] == {"completed": 5, "streaming": 1}


def test_figures_count_refusals_and_server_errors_apart_from_answers():
    samples = [
        Sample("ok", 0.0, 0.010, 0.100, 64),
        Sample("ok", 0.0, 0.030, 0.200, 64),
        Sample("503", 0.0, 0.004, retry_after="5"),
        Sample("503", 0.0, 0.006),
        Sample("500", 0.0, 0.050, detail="Server error"),
        Sample("timeout", 0.0, 30.0),
    ]
    row = report.summarize(samples, 2.0, server_cpu_s=0.5)
    assert row["ok"] == 2 and row["requests"] == 6
    assert row["errors"] == {"503": 2, "500": 1, "timeout": 1}
    assert row["http_500"] == 1
    assert row["refusals"]["count"] == 2 and row["refusals"]["without_retry_after"] == 1
    assert row["ttft_ms"]["p50"] == 10.0 and row["ttft_ms"]["p99"] == 30.0  # answers only
    assert row["answers_per_s"] == 1.0 and row["tokens_per_s"] == 64
    assert row["cpu_ms_per_answer"] == 250.0
    assert row["error_examples"] == {"500": "Server error"}


def test_a_target_not_measured_is_never_reported_as_met():
    results = {"matrix": {"engine@1": {"ttft_ms": {"p50": 1.0, "p99": 2.0}}}, "phases": {}}
    rows = doc.targets(results)
    assert rows and all(row["met"] is None for row in rows)
    assert all("not measured" in row["figure"] for row in rows if row["target"])


def test_added_ttft_is_the_path_minus_the_engine_at_the_same_concurrency():
    results = {
        "matrix": {
            "engine@50": {"ttft_ms": {"p50": 20.0, "p99": 30.0}},
            "api@50": {"ttft_ms": {"p50": 55.5, "p99": 140.0}, "answers_per_s": 160.0},
        },
        "phases": {},
    }
    assert matrix.added(results, "api", 50, "p50") == 35.5
    assert matrix.added(results, "web", 50, "p50") is None
    by_name = {row["name"]: row for row in doc.targets(results)}
    assert by_name["TTFT at 50 streams, p50 / p99, API"]["met"] is True
    assert by_name["answers/s per Daphne process at 50 streams, API"]["met"] is True


def test_profile_frames_are_counted_by_own_and_inclusive_time():
    raw = "\n".join(
        [
            "main (daphne/cli.py:10);handle (/repo/chat/api.py:80);execute (psycopg/cursor.py:5) 6",
            "main (daphne/cli.py:10);handle (/repo/chat/api.py:81);dumps (json/__init__.py:2) 3",
            "main (daphne/cli.py:10);select (selectors.py:1) 1",
        ]
    )
    profile = profiling.top_frames(raw, seconds=1, rate=100)
    assert profile["samples"] == 10 and profile["busy_pct"] == 10
    assert profile["top_self"][0] == {"frame": "execute (psycopg/cursor.py)", "self_pct": 60.0}
    assert profile["top_product_inclusive"] == [{"frame": "handle (chat/api.py)", "total_pct": 90.0}]


def test_beyond_capacity_only_a_503_with_retry_after_passes():
    timeouts = report.summarize([Sample("timeout", 0.0, 30.0)] * 3, 30.0)
    refused = report.summarize([Sample("503", 0.0, 0.01, retry_after="5")] * 3, 1.0)
    rows = {p: timeouts if p == "api" else refused for p in ("api", "web", "ws")}
    results = {"matrix": {f"{p}@1000": row for p, row in rows.items()}, "phases": {}}
    by_name = {row["name"]: row for row in doc.targets(results)}
    assert by_name["HTTP 500s at 1000 streams (all product paths)"]["met"] is True
    assert by_name["failures other than a 503 with Retry-After at 1000 streams (all product paths)"]["met"] is False

    results["matrix"] = {"web@1000": refused}  # the API and the WebSocket not measured
    by_name = {row["name"].split(" (")[0]: row for row in doc.targets(results)}
    assert by_name["failures other than a 503 with Retry-After at 1000 streams"]["met"] is None


# -- the routing phase (bench/routing.py) ---------------------------------------------------------------


def test_the_routing_workload_is_the_same_on_every_run_and_shaped_as_asked():
    first = routing_bench.workload(40, 5, think_s=(0.5, 2.0))
    assert first == routing_bench.workload(40, 5, think_s=(0.5, 2.0))
    assert first != routing_bench.workload(40, 5, think_s=(0.5, 2.0), seed=12)
    assert len({c.id for c in first}) == 40
    assert all(len(c.questions) == len(c.pauses) == 5 for c in first)
    assert all(0 <= c.pauses[0] <= 2.0 and all(0.5 <= p <= 2.0 for p in c.pauses[1:]) for c in first)
    assert len({c.questions for c in first}) > 30  # conversations, not one conversation repeated


def _metrics(prompt: float, cached: float, requests: tuple[float, float], evicted: float = 0.0) -> str:
    """A worker's /metrics as SGLang writes it: counters split over label sets, and other series around."""
    labels = 'model_name="sim-small",engine_type="unified",tp_rank="0",pp_rank="0"'
    return (
        "\n".join(
            [
                "# TYPE sglang:num_running_reqs gauge",
                f"sglang:num_running_reqs{{{labels}}} 3.0",
                "# TYPE sglang:cached_tokens_total counter",
                f'sglang:cached_tokens_total{{{labels},cache_source="device"}} {cached * 0.75}',
                f'sglang:cached_tokens_total{{{labels},cache_source="host"}} {cached * 0.25}',
                "# TYPE sglang:evicted_tokens_total counter",
                f"sglang:evicted_tokens_total{{{labels}}} {evicted}",
                "# TYPE sglang:num_requests_total counter",
                f'sglang:num_requests_total{{{labels},is_streaming="true"}} {requests[0]}',
                f'sglang:num_requests_total{{{labels},is_streaming="false"}} {requests[1]}',
                "# TYPE sglang:prompt_tokens_total counter",
                f"sglang:prompt_tokens_total{{{labels}}} {prompt}",
                "# TYPE sglang:prompt_tokens_histogram histogram",
                f'sglang:prompt_tokens_histogram_bucket{{{labels},le="+Inf"}} 9.0',
                f"sglang:prompt_tokens_histogram_sum{{{labels}}} 99999.0",
                f"sglang:prompt_tokens_histogram_count{{{labels}}} 9.0",
            ]
        )
        + "\n"
    )


def test_a_routing_row_counts_only_what_the_workers_counted_during_it_summed_over_workers():
    one = routing_bench.cache_counters(_metrics(1000, 400, (5, 1), evicted=50))
    assert one == {"prompt_tokens": 1000, "cached_tokens": 400, "requests": 6, "evicted_tokens": 50}
    before = [one, routing_bench.cache_counters(_metrics(0, 0, (0, 0)))]
    after = [
        routing_bench.cache_counters(_metrics(4000, 2800, (15, 1), evicted=250)),
        routing_bench.cache_counters(_metrics(2000, 1000, (7, 0))),
    ]
    row = routing_bench.counted(before, after)
    # (2800 - 400) + 1000 cached of (4000 - 1000) + 2000 prompt tokens
    assert row == {
        "prompt_tokens": 5000,
        "cached_tokens": 3400,
        "hit_rate": 0.68,
        "evicted_tokens": 200,
        "requests_per_worker": [10, 7],
    }
    idle = routing_bench.counted(after, after)
    assert idle["hit_rate"] is None and idle["requests_per_worker"] == [0, 0]


def _routing_rows(ideal, affinity, smg):
    rows = {"ideal": {"hit_rate": ideal}, "affinity": {"hit_rate": affinity}}
    if smg is not None:
        rows["smg:cache_aware"] = {"hit_rate": smg}
    return rows


def test_the_routing_goal_is_met_only_within_5_percent_of_the_ideal_and_above_smg_cache_aware():
    met = routing_bench.goal(_routing_rows(0.90, 0.86, 0.80))
    assert met["met"] is True and met["share_of_ideal"] == 0.9556
    assert routing_bench.goal(_routing_rows(0.90, 0.85, 0.80))["within_5pct_of_ideal"] is False
    assert routing_bench.goal(_routing_rows(0.90, 0.85, 0.80))["met"] is False
    tie = routing_bench.goal(_routing_rows(0.90, 0.88, 0.88))
    assert tie["above_smg_cache_aware"] is False and tie["met"] is False
    assert routing_bench.goal(_routing_rows(0.90, 0.88, None))["met"] is None  # smg not measured
    assert routing_bench.goal(_routing_rows(0.90, 0.50, None))["met"] is False  # missed whatever smg does

    by_name = {
        row["name"].split(" (")[0]: row
        for row in routing_bench.targets(
            {"workers": 3, "goal_result": routing_bench.goal(_routing_rows(0.90, 0.85, 0.80))}
        )
    }
    assert by_name["prefix-cache hit rate, affinity vs the ideal"]["met"] is False
    assert by_name["prefix-cache hit rate, affinity vs smg cache_aware"]["met"] is True
    assert [row["met"] for row in routing_bench.targets({"skipped": "time budget"})] == [None]


def test_the_routing_section_states_the_goal_and_whether_it_was_met():
    rows = _routing_rows(0.90, 0.85, 0.80)
    for name, row in rows.items():
        row |= {
            "ok": 10,
            "requests": 10,
            "not_sent": 0,
            "ttft_ms": {"mean": 20.0, "p99": 50.0},
            "answers_per_s": 2.0,
            "tokens_per_s": 200.0,
            "requests_per_worker": [10] if name == "ideal" else [4, 3, 3],
            "evicted_tokens": 0,
            "moves": 0 if name == "affinity" else None,
        }
    rows["smg:manual"] = {"error": "EngineStartError: smg not ready"}
    routing = {
        "started": "2026-11-23T04:00:00+00:00",
        "quick": True,
        "workers": 3,
        "rows": rows,
        "scale": asdict(routing_bench.QUICK),
        "engine": "...",
        "ideal_engine": "...",
        "goal": "affinity within 5% of the ideal",
        "goal_result": routing_bench.goal(rows),
    }
    text = "\n".join(routing_bench.markdown({"phases": {"routing": routing}}, {}))
    assert "85.0%, 94.4% of the ideal's 90.0% (not within 5%)" in text
    assert ": **missed**." in text
    assert "| smg: manual (routing key) | failed: EngineStartError: smg not ready |" in text
    assert "Not measured: not run." in "\n".join(routing_bench.markdown({"phases": {}}, {}))


@pytest.mark.django_db(transaction=True)
def test_the_routing_bench_counts_each_row_apart_and_affinity_keeps_each_conversation_on_its_node(settings):
    """Two simulated workers, the product's router: the bench's plumbing end to end (no timings)."""
    settings.REDIS_URL = ""  # the router's memory of warm conversations in this process
    flags = ("--enable-metrics", "--enable-cache-report", "--min-answer-tokens", "20", "--max-answer-tokens", "40")
    conversations = routing_bench.workload(6, 3, think_s=(0.0, 0.0), arrival_s=0.0)
    scale = replace(routing_bench.QUICK, concurrent=6)

    async def row(workers: dict[str, str], label: str) -> dict:
        async with routing_bench.product_routing("affinity", workers, label) as send:
            return await routing_bench.measure(send, conversations, scale, list(workers.values()))

    with start_simulator(*flags) as a, start_simulator(*flags) as b:
        workers = {"a": a.url, "b": b.url}
        first, second = asyncio.run(row(workers, "first")), asyncio.run(row(workers, "second"))
    for counted in (first, second):
        assert counted["ok"] == 18 and counted["not_sent"] == 0 and not counted["errors"]
        assert sum(counted["requests_per_worker"]) == 18  # this row's requests, not the other's too
        assert counted["moves"] == 0  # every turn of a conversation on the node of its first
        assert counted["cached_tokens"] > 0
    assert first["prompt_tokens"] == second["prompt_tokens"]
    assert first["answers_digest"] == second["answers_digest"]  # the same work in both rows


def _abuse(unloaded_p99, loaded_p99, *, accepted, refusals, seconds=15):
    ttft = lambda p99: {"p50": p99 / 2, "p95": p99, "p99": p99, "mean": p99 / 2, "n": 20}  # noqa: E731
    return {
        "seconds": seconds,
        "unloaded": {"ttft_ms": ttft(unloaded_p99)},
        "loaded": {"ttft_ms": ttft(loaded_p99)},
        "plan_limits": {"requests_per_minute": 60, "tokens_per_month": 5_000_000},
        "abuser": {"accepted": accepted, "refusal_statuses": refusals, "refusals_without_retry_after": 0},
    }


def test_the_abuse_target_is_the_others_p99_at_most_twice_unloaded():
    assert abuse.target(_abuse(100, 200, accepted={}, refusals={}))["met"] is True
    missed = abuse.target(_abuse(100, 201, accepted={}, refusals={}))
    assert missed["met"] is False and "2.01x" in missed["figure"]
    assert abuse.target({"error": "boom"})["met"] is None


def test_the_abusers_limits_count_the_users_window_across_page_and_websocket_and_the_api_key_apart():
    exact = abuse.limits_kept(_abuse(1, 1, accepted={"web": 41, "ws": 19, "api": 60}, refusals={"web 429": 9}))
    assert exact["exact"] and exact["within"] and exact["refusals_all_429_with_retry_after"]
    over = abuse.limits_kept(_abuse(1, 1, accepted={"web": 41, "ws": 20, "api": 60}, refusals={}))
    assert not over["exact"] and not over["within"]
    busy = abuse.limits_kept(_abuse(1, 1, accepted={"web": 30, "ws": 20, "api": 60}, refusals={"web 503": 4}))
    assert busy["within"] and not busy["exact"] and busy["busy_refusals"] == 4
    assert not busy["refusals_all_429_with_retry_after"]
    # A window of a minute or more cannot show a per-minute limit held exactly.
    assert not abuse.limits_kept(_abuse(1, 1, accepted={"web": 60, "api": 60}, refusals={}, seconds=60))["exact"]


def test_the_relay_phase_judges_the_recommended_set_up_and_shows_cpu_per_token():
    cells = {
        "incremental, interval 4/64/api": {"ok": 200, "answers_per_s": 40.0, "cpu_ms_per_answer": 4.0},
        "incremental, interval 4/1024/api": {"ok": 60, "answers_per_s": 9.0, "cpu_ms_per_answer": 51.2},
        "incremental, interval 1/1024/api": {"ok": 60, "answers_per_s": 6.0, "cpu_ms_per_answer": 10.0},
        "cumulative, interval 4/1024/web": {"error": "EngineStartError: not ready"},
    }
    found = {t["name"]: t for t in relay.targets({"cells": cells})}
    api_64 = found["CPU per 64-token answer at 50 streams, API (incremental, interval 4)"]
    api_1024 = found["CPU per 1024-token answer at 50 streams, API (incremental, interval 4)"]
    web_64 = found["CPU per 64-token answer at 50 streams, web send + SSE (incremental, interval 4)"]
    assert (api_64["figure"], api_64["met"]) == ("4.0 ms", True)
    assert (api_1024["figure"], api_1024["met"]) == ("51.2 ms", False)  # the other set-up's 10 ms is not read
    assert (web_64["figure"], web_64["met"]) == ("not measured", None)
    text = "\n".join(relay.markdown({"phases": {"relay": {"cells": cells}}}, {}))
    assert "| incremental, interval 4 | 1024 | API | 60 | 9.0 | 51.2 | - | - |" in text
    assert "| cumulative, interval 4 | 1024 | web send + SSE | failed: EngineStartError: not ready | | | | |" in text
    assert "incremental, interval 4, API: 49 µs." in text  # (51.2 - 4.0) ms over 960 tokens
    assert "Not measured: not run." in "\n".join(relay.markdown({"phases": {}}, {}))


def test_the_levers_workload_is_the_same_on_every_run_and_holds_the_mix_it_states():
    first, again = levers.workload(3), levers.workload(3)
    assert first == again and first != levers.workload(4)
    kinds = [r["kind"] for r in first]
    assert len(kinds) + sum(1 for r in first if r.get("follow_up")) == 15  # with its two follow-ups
    assert sorted(kinds[-4:]) == ["paraphrase", "paraphrase", "repeat", "repeat"]  # asked again, last
    assert {kinds.count(k) for k in ("faq", "novel", "conversation")} == {4, 2} and kinds.count("document") == 1


def test_the_levers_cell_counts_a_first_ask_served_from_a_cache_as_a_cross_tenant_hit():
    rows = [
        {"kind": "faq", "status": 200, "cache": "miss", "ttft": 0.2},
        {"kind": "repeat", "status": 200, "cache": "hit", "ttft": 0.002},
        {"kind": "paraphrase", "status": 200, "cache": "semantic-hit", "ttft": 0.004},
        {"kind": "faq", "status": 200, "cache": "hit", "ttft": 0.003},  # someone else's answer: must never happen
        {"kind": "novel", "status": 503, "cache": "", "ttft": None},
    ]
    work = {"sim-large": {"prefill": 1000, "decode": 200, "engine": 2, "cached": 3}}
    cell = levers._cell(rows, work, 1.0)
    assert (cell["exact_hits"], cell["semantic_hits"], cell["cross_tenant_hits"], cell["errors"]) == (2, 1, 1, 1)
    assert cell["gpu_seconds"] == round(levers.LARGE_COST * (1000 * levers.PREFILL_S + 200 * levers.DECODE_S), 2)
    found = {t["name"]: t for t in levers.targets({"setups": {"no lever": cell}})}
    assert found["answers served from another person's question"]["met"] is False
    assert found["engine work (GPU-seconds) avoided by all three levers, mixed workload"]["met"] is None
    assert "Not measured: not run." in "\n".join(levers.markdown({"phases": {}}))

"""The benchmark harness's own rules (bench/): what it refuses to wipe, how it counts, what it calls lost.

No timings here: speed is measured by `make bench`, never asserted in tests.
"""

import pytest

from bench import data, report
from bench.load import Sample
from billing.models import UsageRecord
from chat.models import Conversation, Message


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
        UsageRecord.objects.create(user=user, reservation_id=f"r{answer.pk}-{i}", generation_id=f"g{answer.pk}-{i}",
                                   conversation_id=conversation.pk, plan_slug="free", model="sim-small",
                                   prompt_tokens=5, completion_tokens=3, billable_tokens=8)
    return {"user_message_id": question.pk, "assistant_message_id": answer.pk, "conversation_id": conversation.pk,
            "content": content}


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
        Sample("ok", 0.0, 0.010, 0.100, 64), Sample("ok", 0.0, 0.030, 0.200, 64),
        Sample("503", 0.0, 0.004, retry_after="5"), Sample("503", 0.0, 0.006),
        Sample("500", 0.0, 0.050, detail="Server error"), Sample("timeout", 0.0, 30.0),
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
    rows = report.targets(results)
    assert rows and all(row["met"] is None for row in rows)
    assert all("not measured" in row["figure"] for row in rows if row["target"])


def test_added_ttft_is_the_path_minus_the_engine_at_the_same_concurrency():
    results = {"matrix": {"engine@50": {"ttft_ms": {"p50": 20.0, "p99": 30.0}},
                          "api@50": {"ttft_ms": {"p50": 55.5, "p99": 140.0}, "answers_per_s": 160.0}},
               "phases": {}}
    assert report.added(results, "api", 50, "p50") == 35.5
    assert report.added(results, "web", 50, "p50") is None
    by_name = {row["name"]: row for row in report.targets(results)}
    assert by_name["TTFT at 50 streams, p50 / p99, API"]["met"] is True
    assert by_name["answers/s per Daphne process at 50 streams, API"]["met"] is True


def test_profile_frames_are_counted_by_own_and_inclusive_time():
    raw = "\n".join([
        "main (daphne/cli.py:10);handle (/repo/chat/api.py:80);execute (psycopg/cursor.py:5) 6",
        "main (daphne/cli.py:10);handle (/repo/chat/api.py:81);dumps (json/__init__.py:2) 3",
        "main (daphne/cli.py:10);select (selectors.py:1) 1",
    ])
    profile = report.top_frames(raw, seconds=1, rate=100)
    assert profile["samples"] == 10 and profile["busy_pct"] == 10
    assert profile["top_self"][0] == {"frame": "execute (psycopg/cursor.py)", "self_pct": 60.0}
    assert profile["top_product_inclusive"] == [{"frame": "handle (chat/api.py)", "total_pct": 90.0}]


def test_beyond_capacity_only_a_503_with_retry_after_passes():
    timeouts = report.summarize([Sample("timeout", 0.0, 30.0)] * 3, 30.0)
    refused = report.summarize([Sample("503", 0.0, 0.01, retry_after="5")] * 3, 1.0)
    rows = {p: timeouts if p == "api" else refused for p in ("api", "web", "ws")}
    results = {"matrix": {f"{p}@1000": row for p, row in rows.items()}, "phases": {}}
    by_name = {row["name"]: row for row in report.targets(results)}
    assert by_name["HTTP 500s at 1000 streams (all product paths)"]["met"] is True
    assert by_name["failures other than a 503 with Retry-After at 1000 streams (all product paths)"]["met"] is False

    results["matrix"] = {"web@1000": refused}  # the API and the WebSocket not measured
    by_name = {row["name"].split(" (")[0]: row for row in report.targets(results)}
    assert by_name["failures other than a 503 with Retry-After at 1000 streams"]["met"] is None

"""The staff dashboard: today's figures from the database and the ledger, as a page and as JSON."""

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import Plan, Subscription
from chat.models import Conversation, Message
from config.refusal_counts import REFUSALS
from console import selectors, service_load, tasks
from console.service_load import SERVICE_LOAD
from inference import fleet
from inference.loads import EngineLoad
from moderation.models import Flag
from tests.conftest import make_user
from tests.inference.helpers import node_view
from tests.support.accounts import signed_in
from tests.test_settings import run_manage

from .conftest import usage


def test_the_dashboard_json_is_for_staff_only(client, admin_client, moderator_client, db):
    url = reverse("admin:console-dashboard-data")

    assert client.get(url).status_code == 302
    assert signed_in(make_user("member@example.com")).get(url).status_code == 302
    assert admin_client.get(url).status_code == 200
    assert moderator_client.get(url).status_code == 200


def test_the_dashboard_counts_todays_activity(admin_client):
    now = timezone.now()
    ada = make_user("ada@example.com")
    make_user("grace@example.com", is_suspended=True, suspended_reason="Spam")
    Subscription.objects.create(
        user=ada,
        plan=Plan.objects.get(slug="pro"),
        status=Subscription.Status.ACTIVE,
        provider="stripe",
        provider_subscription_id="sub_1",
        current_period_start=now - timedelta(days=3),
        current_period_end=now + timedelta(days=27),
    )
    conversation = Conversation.objects.create(owner=ada, model="demo")
    question = Message.objects.create(conversation=conversation, role=Message.Role.USER, content="hi")
    Message.objects.create(conversation=conversation, role=Message.Role.ASSISTANT, parent=question, content="hello")
    Message.objects.create(
        conversation=conversation, role=Message.Role.ASSISTANT, parent=question, status=Message.Status.BLOCKED
    )
    old = Message.objects.create(conversation=conversation, role=Message.Role.USER, content="yesterday")
    Message.objects.filter(pk=old.pk).update(created=now - timedelta(hours=30))
    usage(ada, 120, prompt=100, completion=20, plan_slug="pro")
    Flag.objects.create(user=ada, source=Flag.Source.INPUT, category="Spam", blocked=True, text="buy now")
    Flag.objects.create(user=ada, source=Flag.Source.OUTPUT, category="Spam", blocked=True, text="cut")
    Flag.objects.create(user=ada, source=Flag.Source.INPUT, category="Spam", blocked=False, text="only flagged")

    data = admin_client.get(reverse("admin:console-dashboard-data")).json()

    assert data["users"] == {"total": 3, "joined_today": 3, "suspended": 1}  # with the superuser
    assert {"plan": "Pro", "users": 1} in data["plans"]
    assert {"plan": "Free (no subscription)", "users": 2} in data["plans"]
    assert data["messages"]["questions_hour"] == 1 and data["messages"]["questions_day"] == 1
    assert data["messages"]["answers_hour"] == 2
    # Blocked counts questions refused as well as answers cut, as the moderation table beside it does.
    assert data["blocked"] == {"day": 2, "questions": 1, "answers": 1}
    assert data["tokens_today"] == {"billable": 120, "prompt": 100, "completion": 20}
    assert sum(data["last_hour"]["questions"]) == 1 and sum(data["last_hour"]["answers"]) == 2
    assert len(data["last_hour"]["labels"]) == 60
    assert sum(data["today"]["tokens"]) == 120


def test_the_console_index_is_the_dashboard(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()

    for chart in (
        "chart-last-hour",
        "chart-load",
        "chart-ttft",
        "chart-tokens",
        "chart-cache",
        "chart-refused",
        "chart-moderation",
        "chart-today",
    ):
        assert f'<canvas id="{chart}"' in page
    assert 'id="dashboard-data"' in page and 'id="dashboard-nodes"' in page
    assert "no recent load sample" in page  # the one node of SGLANG_URL, before any poll
    assert "vendor/chart.js/chart.umd.js" in page and "console/dashboard.js" in page
    assert reverse("admin:console-dashboard-data") in page


# --- the service over the last hour -----------------------------------------------------------------


def _at(message_or_record, moment, **fields):
    """Move a row to `moment` (auto_now_add cannot be set at creation)."""
    type(message_or_record).objects.filter(pk=message_or_record.pk).update(created=moment, **fields)


def _answer(conversation, moment, ttft_ms, *, created=None):
    answer = Message.objects.create(
        conversation=conversation, role=Message.Role.ASSISTANT, content="a", ttft_ms=ttft_ms
    )
    _at(answer, created or moment - timedelta(seconds=5), finished=moment)
    return answer


@pytest.fixture
def now():
    # Half a minute into a minute, so "k minutes ago" is always minute 59 - k of the hour's 60.
    return timezone.now().replace(second=30, microsecond=0)


@pytest.fixture
def fleet_of_two(monkeypatch):
    nodes = [
        node_view(
            "gpu-a",
            models=("demo",),
            load=EngineLoad(
                running_requests=5,
                waiting_requests=2,
                used_tokens=9000,
                total_tokens=20000,
                token_usage=0.42,
                max_running_requests=64,
                cache_hit_rate=0.8,
                gen_throughput=812.25,
            ),
        ),
        node_view("gpu-b", models=("demo",), health="down", draining=True),
    ]
    monkeypatch.setattr(fleet, "snapshot", lambda: nodes)
    return nodes


def test_time_to_first_token_percentiles_per_minute_and_over_the_hour(db, now):
    conversation = Conversation.objects.create(owner=make_user(), model="demo")
    for ttft in (100, 200, 300, 400):
        _answer(conversation, now - timedelta(minutes=2), ttft)
    # Counted in the minute it finished, not the one it started in.
    _answer(conversation, now - timedelta(minutes=10), 1000, created=now - timedelta(minutes=14))
    _answer(conversation, now - timedelta(minutes=2), None)  # no first token: not counted
    _answer(conversation, now - timedelta(minutes=61), 5)  # finished before the hour
    question = Message.objects.create(conversation=conversation, role=Message.Role.USER, content="q", ttft_ms=7)
    _at(question, now - timedelta(minutes=2), finished=now - timedelta(minutes=2))

    first_minute = (now - timedelta(minutes=59)).replace(second=0)
    figures = selectors.time_to_first_token(first_minute)

    assert figures["p50"][57] == 250 and figures["p95"][57] == 385  # 300 + 0.85 x 100, as percentile_cont
    assert figures["p50"][49] == figures["p95"][49] == 1000
    assert [n for n, value in enumerate(figures["p50"]) if value is not None] == [49, 57]
    assert figures["hour_p50"] == 300 and figures["hour_p95"] == 880  # 400 + 0.8 x 600


def test_the_percentiles_outside_postgresql_are_percentile_conts(db, now, monkeypatch):
    """The embedded default's SQLite has no percentile_cont: the hour's values give the same figures."""
    conversation = Conversation.objects.create(owner=make_user(), model="demo")
    for minutes, ttft in ((2, 100), (2, 200), (2, 300), (2, 400), (10, 1000), (61, 5)):
        _answer(conversation, now - timedelta(minutes=minutes), ttft)
    first_minute = (now - timedelta(minutes=59)).replace(second=0)
    in_sql = selectors.time_to_first_token(first_minute)

    monkeypatch.setattr(selectors.connection, "vendor", "sqlite")
    in_python = selectors.time_to_first_token(first_minute)

    assert in_python == in_sql
    assert in_python["p95"][57] == 385 and in_python["hour_p95"] == 880


def test_percentile_matches_percentile_cont():
    assert selectors.percentile([], 0.5) is None
    assert selectors.percentile([7], 0.95) == 7
    assert selectors.percentile([1, 2, 3, 4], 0.5) == 2.5
    assert selectors.percentile([10, 20, 30, 40, 50], 0.95) == 48


def test_the_dashboard_shows_the_service_over_the_last_hour(db, now, fleet_of_two):
    ada = make_user("ada@example.com")
    conversation = Conversation.objects.create(owner=ada, model="demo")
    _answer(conversation, now - timedelta(minutes=1), 640)
    # The ledger: a chat answer and an API completion three minutes ago, one line before the hour.
    chat_line = usage(ada, 1000, prompt=1000, completion=600)
    api_line = usage(ada, 1000, prompt=1000, completion=1200)
    old_line = usage(ada, 1000, prompt=1000, completion=9999)
    _at(chat_line, now - timedelta(minutes=3), cached_tokens=250)
    _at(api_line, now - timedelta(minutes=3), cached_tokens=750, api_key_id=7)
    _at(old_line, now - timedelta(minutes=90), cached_tokens=0)
    # Moderation: two inputs refused (violence) and an answer cut (hate) a minute ago, a report five
    # minutes ago, an old flag.
    for source, category, blocked, minutes in (
        ("input", "violence", True, 1),
        ("input", "violence", True, 1),
        ("output", "hate", True, 1),
        ("user_report", "", False, 5),
        ("input", "violence", True, 70),
    ):
        flag = Flag.objects.create(user=ada, source=source, category=category, blocked=blocked)
        Flag.objects.filter(pk=flag.pk).update(created=now - timedelta(minutes=minutes))
    # Refusals, as the gate counts them: three 429s a minute ago, one 503 now, one 429 two hours ago.
    ts = now.timestamp()
    for _ in range(3):
        REFUSALS.add("429", now=ts - 60)
    REFUSALS.add("503", now=ts)
    REFUSALS.add("429", now=ts - 7200)
    # The sampled load: two samples two minutes ago (the peak is kept), one this minute.
    SERVICE_LOAD.record({"in_flight": 3, "running:gpu-a": 5, "waiting:gpu-a": 2}, now=ts - 120)
    SERVICE_LOAD.record({"in_flight": 1, "running:gpu-a": 9, "waiting:gpu-a": 0}, now=ts - 110)
    SERVICE_LOAD.record({"in_flight": 4, "running:gpu-a": 6, "waiting:gpu-a": 4}, now=ts)

    data = selectors.dashboard(now)
    hour = data["last_hour"]

    assert hour["api"][56] == 1 and sum(hour["api"]) == 1
    assert hour["tokens_per_second"][56] == 30.0 and sum(hour["tokens_per_second"]) == 30.0  # 1,800 / 60
    assert hour["cache_hit_rate"][56] == 50.0  # 1,000 cached of 2,000 prompt tokens
    assert hour["cache_hit_rate"][55] is None  # no prompt tokens that minute: no rate
    assert hour["ttft_p50"][58] == hour["ttft_p95"][58] == 640
    assert hour["refused"]["429"][58] == 3 and hour["refused"]["503"][59] == 1
    assert sum(hour["refused"]["429"]) == 3 and sum(hour["refused"]["503"]) == 1
    assert hour["moderation"]["input"][58] == 2 and hour["moderation"]["output"][58] == 1
    assert hour["moderation"]["user_report"][54] == 1
    assert sum(map(sum, hour["moderation"].values())) == 4
    assert data["moderation_categories"] == [
        {"category": "violence", "input": 2, "output": 0, "user_report": 0, "blocked": 2, "total": 2},
        {"category": "hate", "input": 0, "output": 1, "user_report": 0, "blocked": 1, "total": 1},
        {"category": "uncategorised", "input": 0, "output": 0, "user_report": 1, "blocked": 0, "total": 1},
    ]
    assert hour["in_flight"][57] == 3 and hour["in_flight"][59] == 4
    assert hour["in_flight"][58] is None  # no sample that minute: a gap, not a zero
    assert hour["nodes"]["gpu-a"]["running"][57] == 9 and hour["nodes"]["gpu-a"]["waiting"][57] == 2
    assert hour["nodes"]["gpu-a"]["waiting"][59] == 4
    assert list(hour["nodes"]) == ["gpu-a"]

    assert data["service"] == {
        "generating": 0,
        "running": 5,
        "waiting": 2,
        "ttft_p50": 640,
        "ttft_p95": 640,
        "tokens_per_second": 0.5,
        "cache_hit_rate": 50.0,
        "answered_from_cache": 0,
        "refused_429": 3,
        "refused_503": 1,
        "flags": 4,
    }
    assert data["nodes"] == [
        {
            "name": "gpu-a",
            "group": "default",
            "health": "up",
            "state": "serving",
            "routable": True,
            "models": ["demo"],
            "load": {
                "running": 5,
                "waiting": 2,
                "max_running": 64,
                "token_usage": 42.0,
                "cache_hit_rate": 80.0,
                "gen_throughput": 812.2,
            },
        },
        {
            "name": "gpu-b",
            "group": "default",
            "health": "down",
            "state": "draining",
            "routable": False,
            "models": ["demo"],
            "load": None,
        },
    ]


def test_generations_in_flight_are_the_admission_count(db, now, fleet_of_two, monkeypatch):
    monkeypatch.setattr(selectors.admission, "in_flight", lambda: 11)

    assert selectors.dashboard(now)["service"]["generating"] == 11


def test_the_dashboard_still_shows_when_redis_cannot_answer(db, now, fleet_of_two, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there

    data = selectors.dashboard(now)

    assert data["last_hour"]["refused"] is None and data["last_hour"]["in_flight"] is None
    assert data["service"]["generating"] is None and data["service"]["refused_429"] is None
    assert data["users"]["total"] == 0 and len(data["nodes"]) == 2


def test_the_dashboard_reads_a_fixed_number_of_queries(admin_client, now, fleet_of_two, django_assert_num_queries):
    ada = make_user("ada@example.com")
    conversation = Conversation.objects.create(owner=ada, model="demo")
    selectors.dashboard(now)  # the default plan is seeded once
    with django_assert_num_queries(12) as few:  # twelve since the blocked tile counts questions too
        selectors.dashboard(now)
    for n in range(20):
        _answer(conversation, now - timedelta(minutes=n), 100 + n)
        usage(ada, 100, completion=10)
        Flag.objects.create(user=ada, source="input", category=f"c{n % 3}", blocked=True)
    with django_assert_num_queries(len(few.captured_queries)):
        selectors.dashboard(now)


def test_the_service_load_is_sampled_per_minute_as_its_peak(db, now, fleet_of_two, monkeypatch):
    monkeypatch.setattr(service_load.admission, "in_flight", lambda: 6)
    ts = now.timestamp()

    assert service_load.record(now=ts) == {"in_flight": 6, "running:gpu-a": 5, "waiting:gpu-a": 2}
    fleet_of_two[0] = node_view(
        "gpu-a", models=("demo",), load=EngineLoad(running_requests=1, waiting_requests=8, used_tokens=0)
    )
    service_load.record(now=ts + 10)
    tasks.record_service_load()  # the beat's task: this minute, real time

    history = service_load.per_minute(int(ts) // 60, 1)
    assert history["in_flight"] == [6]
    assert history["nodes"] == {"gpu-a": {"running": [5], "waiting": [8]}}  # gpu-b has no load sample


SQLITE_SCRIPT = """
import json
from datetime import timedelta
from django.utils import timezone
from accounts.models import User
from billing.models import UsageRecord
from chat.models import Conversation, Message
from config.refusal_counts import REFUSALS
from console import selectors
from moderation.models import Flag

now = timezone.now().replace(second=30, microsecond=0)
ada = User.objects.create_user(email="ada@example.com", password="x" * 20)
conversation = Conversation.objects.create(owner=ada, model="demo")
for ttft in (100, 200, 300, 400):
    answer = Message.objects.create(conversation=conversation, role="assistant", ttft_ms=ttft)
    Message.objects.filter(pk=answer.pk).update(created=now - timedelta(minutes=2, seconds=5),
                                                finished=now - timedelta(minutes=2))
line = UsageRecord.objects.create(user=ada, reservation_id="r", generation_id="g", plan_slug="free", model="demo",
                                  prompt_tokens=1000, cached_tokens=400, completion_tokens=600, billable_tokens=600)
UsageRecord.objects.filter(pk=line.pk).update(created=now - timedelta(minutes=3))
flag = Flag.objects.create(user=ada, source="input", category="Spam", blocked=True)
Flag.objects.filter(pk=flag.pk).update(created=now - timedelta(minutes=1))
REFUSALS.add("503", now=now.timestamp())
data = selectors.dashboard(now)
hour = data["last_hour"]
print(json.dumps({"p50": hour["ttft_p50"][57], "p95": hour["ttft_p95"][57], "tps": hour["tokens_per_second"][56],
                  "cache": hour["cache_hit_rate"][56], "flags": hour["moderation"]["input"][58],
                  "refused": hour["refused"]["503"][59], "nodes": [n["name"] for n in data["nodes"]]}))
"""


def test_the_dashboard_works_on_the_embedded_default(tmp_path):
    """SQLite (no percentile_cont) and no Redis (refusals and samples in the process's memory)."""
    database = {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    migrated = run_manage("migrate", "-v", "0", **database)
    assert migrated.returncode == 0, migrated.stderr

    result = run_manage("shell", "-v", "0", "-c", SQLITE_SCRIPT, **database)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "p50": 250,
        "p95": 385,
        "tps": 10.0,
        "cache": 40.0,
        "flags": 1,
        "refused": 1,
        "nodes": ["default"],
    }


def test_answers_from_the_response_cache_are_engine_work_saved_not_work_done(db, now, fleet_of_two):
    """A replayed answer ran on no engine: it is not generated tokens or prefix-cache traffic, but work
    saved, beside the prompt tokens the engines' prefix caches served."""
    ada = make_user("ada@example.com")
    engine_line = usage(ada, 1000, prompt=1000, completion=600)
    replayed = usage(ada, 0, prompt=1000, completion=600)
    _at(engine_line, now - timedelta(minutes=3), cached_tokens=400)
    _at(replayed, now - timedelta(minutes=3), cached_tokens=400, from_cache=True, node="response-cache")

    data = selectors.dashboard(now)

    hour = data["last_hour"]
    assert hour["tokens_per_second"][56] == 10.0  # 600 generated, not 1,200
    assert hour["cache_hit_rate"][56] == 40.0  # the engine's 400 of 1,000, the replay left out
    assert hour["from_cache"][56] == 1 and data["service"]["answered_from_cache"] == 1
    this_hour = timezone.localtime(now).hour
    assert data["today"]["saved_prefix"][this_hour] == 400
    assert data["today"]["saved_answers"][this_hour] == 1600


def test_easy_turns_auto_gave_the_small_model_are_charted_per_hour(db, now, fleet_of_two):
    ada = make_user("ada@example.com")
    easy = usage(ada, 300, prompt=200, completion=100)
    named = usage(ada, 300, prompt=200, completion=100)  # the model asked for by name: not Auto's doing
    _at(easy, now - timedelta(minutes=3), auto_route="easy", model="sim-small")
    _at(named, now - timedelta(minutes=3), model="sim-small")

    data = selectors.dashboard(now)

    assert data["today"]["auto_small"][timezone.localtime(now).hour] == 300

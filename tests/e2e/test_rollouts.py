"""A rollout in the staff console, in a real browser: staff start one to a new version of a model, people
chat meanwhile, the new version (the simulator's labelled --degraded one) fails requests, and the page
shows the rollout rolled back and why, with what each version served. Then two eval runs compared.

Screenshots go to a temporary directory, or to docs/screenshots/ (committed) with E2E_SCREENSHOTS=1:

    E2E_SCREENSHOTS=1 .venv/bin/pytest tests/e2e/test_rollouts.py
"""

from __future__ import annotations

import re

import pytest
from allauth.mfa.totp.internal.auth import generate_totp_secret
from playwright.sync_api import expect

from evals.models import EvalItem, EvalResult, EvalRun, EvalSet, Rollout
from evals.rollouts import check_rollouts
from harness.engines import start_simulator
from inference import fleet, rollout, version_stats
from inference.models import InferenceNode, ModelRoute
from tests.chat.conftest import _settle_down
from tests.chat.live import ChatClient
from tests.conftest import make_user
from tests.e2e.chatpage import TIMEOUT
from tests.e2e.test_console import sign_in_with_code
from tests.support.accounts import make_staff
from tests.support.people import answers_by, ask_until
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.e2e


@pytest.fixture
def operator(transactional_db):
    secret = generate_totp_secret()
    return make_staff("release@example.com", secret=secret, is_superuser=True), secret


@pytest.fixture
def people(e2e_server, transactional_db):
    person = make_user("sailor@example.com")
    put_on_plan(person, "pro", requests_per_minute=10_000, new_chats_per_day=100_000)
    client = ChatClient(e2e_server, person)
    yield client
    _settle_down(client)
    client.close()


def test_staff_start_a_rollout_and_watch_it_roll_back(open_page, operator, people, screenshot_dir):
    person, secret = operator
    with (
        start_simulator("--echo", "--accept-any-model") as blue,
        start_simulator("--echo", "--accept-any-model", "--degraded") as green,
    ):
        InferenceNode.objects.create(name="blue-1", base_url=blue.url, group="blue")
        InferenceNode.objects.create(name="green-1", base_url=green.url, group="green")
        ModelRoute.objects.create(model="sim-small", group="blue", weight=100)
        ModelRoute.objects.create(model="sim-small", group="green", weight=0)
        fleet.invalidate()
        rollout.invalidate()

        page = open_page(None, theme="light")
        sign_in_with_code(page, person.email, secret)
        page.goto("/admin/evals/rollout/add/")
        page.get_by_label("Model").select_option("sim-small")
        page.get_by_label("Old version (node group)").select_option("blue")
        page.get_by_label("New version (node group)").select_option("green")
        page.get_by_label("Steps").fill("50, 100")
        page.get_by_label("Window seconds").fill("0")
        page.get_by_label("Min answers").fill("3")
        page.get_by_label("Max error rate").fill("0.05")
        page.get_by_role("button", name="Save", exact=True).click()
        row = page.locator("#result_list tr", has_text="sim-small")
        expect(row).to_contain_text("Running", timeout=TIMEOUT)
        expect(row).to_contain_text("50%")
        conducted = Rollout.objects.get()
        assert dict(ModelRoute.objects.values_list("group", "weight")) == {"blue": 50, "green": 50}

        # People chat; the new version fails some of their requests, which the old one answers.
        started = conducted.step_started
        answers = ask_until(
            people,
            lambda: (
                version_stats.totals(["green-1"], started.timestamp())[1] >= 1 and answers_by("green-1", started) >= 3
            ),
        )
        assert {answer["status"] for answer in answers} == {"completed"}
        assert check_rollouts() == {conducted.pk: "rolled back"}  # the beat's check

        row.locator("th a").click()
        expect(page.locator(".field-status")).to_contain_text("rolled back", timeout=TIMEOUT)
        expect(page.locator(".field-reason")).to_contain_text("Error rate ")
        expect(page.locator(".field-share_shown")).to_contain_text("0%")
        figures = page.get_by_test_id("rollout-figures")
        expect(figures).to_contain_text("blue")
        expect(figures).to_contain_text("green")
        page.set_viewport_size({"width": 1400, "height": 1100})
        page.screenshot(path=screenshot_dir / "console-rollout-rolled-back-light.png", full_page=True)
    assert dict(ModelRoute.objects.values_list("group", "weight")) == {"blue": 100, "green": 0}


def test_two_eval_runs_compared_side_by_side(open_page, operator, screenshot_dir):
    person, secret = operator
    eval_set = EvalSet.objects.create(name="Harbour facts", created_by=person)
    questions = [
        ("What year did the harbour open? Answer with the year only.", "exact", "1862"),
        ("Name the keeper's island.", "contains", "Ouessant"),
        ('Reply with {"city": ..., "population": ...} for Brest.', "json_schema", ""),
        ("Explain the tides to a child.", "judge", "Simple words, and correct."),
    ]
    items = [
        EvalItem.objects.create(
            eval_set=eval_set,
            position=n,
            prompt=prompt,
            scorer=scorer,
            reference=reference,
            schema={"type": "object"} if scorer == "json_schema" else None,
        )
        for n, (prompt, scorer, reference) in enumerate(questions)
    ]
    outcomes = {
        "blue": [
            ("1862", True),
            ("It is Ouessant.", True),
            ('{"city": "Brest", "population": 139000}', True),
            ("", False),
        ],
        "green": [("1862", True), ("It is Sein.", False), ('{"city": "Brest", "population"', False), ("", False)],
    }
    for group, answers in outcomes.items():
        run = EvalRun.objects.create(
            eval_set=eval_set,
            model="sim-small",
            node_group=group,
            status="completed",
            items_total=4,
            items_done=4,
            items_passed=sum(passed for _, passed in answers),
            score_sum=float(sum(passed for _, passed in answers)),
        )
        for item, (answer, passed) in zip(items, answers, strict=True):
            EvalResult.objects.create(
                run=run, item=item, answer=answer, score=float(passed), passed=passed, detail="Scored.", latency_ms=420
            )

    page = open_page(None, theme="light")
    sign_in_with_code(page, person.email, secret)
    page.goto("/admin/evals/evalrun/")
    page.locator("#action-toggle").check()
    page.locator("select[name=action]").select_option("compare_runs")
    page.get_by_role("button", name=re.compile("Go|Run", re.I)).click()
    expect(page.get_by_test_id("eval-compare-summary")).to_have_text(
        "From the first run to the second: 0 better, 2 worse, 2 the same.", timeout=TIMEOUT
    )
    expect(page.get_by_test_id("eval-compare-items").locator("tr.eval-change-worse")).to_have_count(2)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.screenshot(path=screenshot_dir / "console-eval-compare-light.png", full_page=True)

"""Fixtures for the inference tests: simulated SGLang workers on real loopback sockets.

The client and the simulated worker are tested without the database. The fleet and what the product
does with it read and write their rows, so these files use it too: test_nodes, test_node_admin,
test_fleet_live, test_gateway_mode, test_admission_live, test_priority_live, and the node-health test
of test_hostile_requests. Workers run at the ``instant`` speed unless timing is what a test is about,
so the whole directory stays fast on a small machine.
"""

from __future__ import annotations

import pytest

from harness.engines import log_report, start_simulator
from tests.inference.helpers import LONG_ANSWER_ARGS

API_KEY = "sim-test-key"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the logs of every simulated worker / gateway still running to a failing test's report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        logs = log_report()
        if logs:
            report.sections.append(("simulated engines", logs))


@pytest.fixture(scope="module")
def worker():
    """A shared worker: metrics on, cached tokens reported in OpenAI usage too."""
    with start_simulator("--enable-metrics", "--enable-cache-report") as w:
        yield w


@pytest.fixture(scope="module")
def slow_worker():
    """A worker whose answers take long enough to act on mid-stream (each ~1000 tokens, 10 ms apart)."""
    with start_simulator(
        *LONG_ANSWER_ARGS,
        "--max-running-requests",
        "2",
    ) as w:
        yield w

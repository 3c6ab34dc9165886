"""Waiting for a condition outside the test's control (another process, the database)."""

import time


def wait_until(predicate, *, timeout: float = 30, interval: float = 0.1, what: str = "condition"):
    """Poll until `predicate()` is truthy and return its value; never asserts on elapsed time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")

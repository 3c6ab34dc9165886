"""Fixtures of the fault tests. Every fault test breaks something on purpose, so none of them uses the
session's shared engine and server (tests/support/live_fixtures.py): each starts, in a `Stack`, the
processes it will kill, hang or cut off, and records what the product accepted in `accepted`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.invariants import Accepted
from tests.faults.support import Stack
from tests.support.live_fixtures import HEARTBEAT_TTL
from tests.support.plans import put_on_plan


@pytest.fixture
def accepted() -> Accepted:
    return Accepted()


@pytest.fixture
def pro_user(transactional_db, user):
    put_on_plan(user, "pro")
    return user


@pytest.fixture
def stack(transactional_db, tmp_path, settings) -> Iterator[Stack]:
    # The test process plays Celery beat (the reaper): it uses the servers' heartbeat lifetime.
    settings.CHAT_HEARTBEAT_TTL_SECONDS = int(HEARTBEAT_TTL)
    stack = Stack(tmp_path)
    yield stack
    stack.close()

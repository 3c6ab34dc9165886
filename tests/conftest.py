"""Fixtures shared by the whole suite. Tests run on the real PostgreSQL and Redis (see pyproject)."""

import pytest
from allauth.account.models import EmailAddress
from django.core.cache import cache

from accounts.models import User
from billing.quota_store import get_store
from chat.generation import admission, response_cache
from config import refusal_counts
from harness.temp_files import use_pytest_temp
from inference import fleet, rollout

pytest_plugins = ["tests.support.live_fixtures"]


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_in_pytest_dirs(tmp_path_factory):
    """Every file a test's processes write goes under this run's pytest directory, none to /tmp:
    logs to <basetemp>/logs (their paths and tails are in failure messages), everything else that
    uses the system temporary directory to <basetemp>/tmp (harness/temp_files.py; proved by
    tests/test_temp_files.py). Autouse and session-wide, so it is in place before any live fixture."""
    use_pytest_temp(tmp_path_factory.mktemp("logs", numbered=False), tmp_path_factory.mktemp("tmp", numbered=False))


PASSWORD = "correct-horse-battery-staple"


@pytest.fixture(autouse=True)
def _media(settings, tmp_path):
    """Files people upload go to each test's own directory (never the checkout's var/media)."""
    settings.MEDIA_ROOT = str(tmp_path / "media")


@pytest.fixture(autouse=True)
def _clean_cache():
    """Rate-limit counters and quota figures live in the Redis cache, and the answers the response cache
    kept in Redis too (or in this process); no test sees another's."""
    cache.clear()
    response_cache.clear("a new test")
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _process_counts_forgotten():
    """What this process remembers between requests is not another test's: the count of answers in
    flight its last admission saw (admission refuses early on it), and the refusals it has counted but
    not yet written (a test's loop may end before they are)."""
    admission.forget_last_count()
    refusal_counts.forget_unwritten()
    yield
    admission.forget_last_count()
    refusal_counts.forget_unwritten()


@pytest.fixture(autouse=True)
def _fleet_read_once_per_test(settings):
    """The fleet snapshot and rollout routes are re-read once a second in each process; in the test
    process they are read once per test instead (and again after any change a service or test makes
    through inference.fleet/rollout.invalidate), so a test's query counts do not depend on the clock.
    Live servers are other processes and keep the real interval."""
    settings.INFERENCE_FLEET_REFRESH_SECONDS = 3600
    fleet.invalidate()
    rollout.invalidate()
    yield
    fleet.invalidate()
    rollout.invalidate()


def make_user(
    email: str = "ada@example.com", *, password: str = PASSWORD, staff: bool = False, verified: bool = True, **fields
) -> User:
    user = User.objects.create_user(email=email, password=password, is_staff=staff, **fields)
    EmailAddress.objects.create(user=user, email=email, verified=verified, primary=True)
    return user


@pytest.fixture
def password() -> str:
    return PASSWORD


@pytest.fixture
def user(db) -> User:
    return make_user()


@pytest.fixture
def other_user(db) -> User:
    return make_user("grace@example.com")


@pytest.fixture
def staff_user(db) -> User:
    return make_user("staff@example.com", staff=True)


@pytest.fixture
def user_client(client, user):
    client.force_login(user)
    return client


@pytest.fixture(params=["redis", "in-process"])
def store_kind(request, settings):
    """The test runs twice: on Redis, and on the embedded default's in-process stores (no REDIS_URL)."""
    if request.param == "in-process":
        settings.REDIS_URL = ""
        get_store().clear()
    return request.param

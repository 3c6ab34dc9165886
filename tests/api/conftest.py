import openai
import pytest

from accounts.api_keys import create_api_key
from tests.support.live_fixtures import EMBED, WINDOW  # noqa: F401  (the embedding tests' constants)
from tests.support.plans import put_on_plan


@pytest.fixture
def pro_key(transactional_db, server, user):
    put_on_plan(user, "pro")
    key, raw = create_api_key(user, "tests")
    return key, raw


@pytest.fixture
def client(server, pro_key):
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key=pro_key[1], max_retries=0, timeout=60) as client:
        yield client

"""The compatibility suite: real, unmodified client libraries (the `openai` SDK, LangChain, LiteLLM,
the OpenAI Agents SDK, and the JavaScript `openai` package where Node is present) against a live
server in front of the simulated SGLang worker. Each test checks what the program gets back, not
only that a call succeeded."""

import pytest

from accounts.api_keys import create_api_key
from tests.support.plans import put_on_plan


@pytest.fixture
def api(transactional_db, server, user):
    """(base URL of /v1, a Pro plan's API key)."""
    put_on_plan(user, "pro")
    _, raw = create_api_key(user, "compat")
    return server.base_url + "/v1", raw

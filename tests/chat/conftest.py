"""Signed-in chat clients for the live tests (engine and server come from tests.support.live_fixtures)."""

import pytest

from chat.models import Message
from tests.chat.live import ChatClient, wait_until


def _settle_down(client: ChatClient) -> None:
    """Let every answer end before the test database is flushed under the server's feet."""
    for message_id in Message.objects.filter(status__in=Message.ACTIVE_STATUSES).values_list("id", flat=True):
        client.http.post(f"/chat/api/messages/{message_id}/stop")
    wait_until(
        lambda: not Message.objects.filter(status__in=Message.ACTIVE_STATUSES).exists(), what="every generation to end"
    )


@pytest.fixture
def chat(transactional_db, server, user):
    client = ChatClient(server, user)
    yield client
    _settle_down(client)
    client.close()


@pytest.fixture
def other_chat(transactional_db, server, other_user):
    client = ChatClient(server, other_user)
    yield client
    client.close()

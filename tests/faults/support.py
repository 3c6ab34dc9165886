"""Helpers of the fault tests: a stack of processes a test may break, and the send that records
what the product accepted (for tests/faults/invariants.py)."""

from __future__ import annotations

from chat.models import Message
from harness.engines import ManagedProcess, start_simulator
from tests.chat.live import ChatClient
from tests.faults.invariants import Accepted
from tests.support.live_fixtures import HEARTBEAT_TTL
from tests.support.servers import LiveServer, start_daphne
from tests.support.waiting import wait_until

#: Long answers at about 60 tokens a second: a test has seconds to act mid-answer.
LONG_ANSWERS = ("--accept-any-model", "--min-answer-tokens", "300", "--max-answer-tokens", "300")
QUESTION = "Tell me a long story about a lighthouse keeper."


class Stack:
    """Engines and servers started by one test, all stopped at its end (whatever it killed)."""

    def __init__(self, log_dir) -> None:
        self.log_dir = log_dir
        self.processes: list[ManagedProcess] = []
        self.servers: list[LiveServer] = []
        self.clients: list[ChatClient] = []

    def engine(self, *options: str, speed: str = "slow", **kwargs) -> ManagedProcess:
        engine = start_simulator(*LONG_ANSWERS, *options, speed=speed, **kwargs)
        self.processes.append(engine)
        return engine

    def server(self, engine_url: str, **env: str) -> LiveServer:
        server = start_daphne(
            engine_url=engine_url,
            extra_env={"CHAT_HEARTBEAT_TTL_SECONDS": HEARTBEAT_TTL, **env},
            log_dir=self.log_dir,
        )
        self.servers.append(server)
        return server

    def client(self, server: LiveServer, user) -> ChatClient:
        client = ChatClient(server, user)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for server in self.servers:
            server.stop()
        for process in self.processes:
            process.stop()


def send_accepted(client: ChatClient, accepted: Accepted, content: str = QUESTION, **fields) -> dict:
    """Send, assert the product took it (201), and record it for the invariant check."""
    return accepted.add(client.send_ok(content, **fields), content)


def first_events(client: ChatClient, answer_id: int, count: int = 3) -> list:
    """The first `count` SSE events of an answer (proof it is streaming), leaving the stream open no longer."""
    events = list(client.events(answer_id, limit=count))
    assert len(events) == count and all(e.kind == "delta" for e in events), events
    return events


def streamed_text(events) -> str:
    return "".join(e.data["text"] for e in events if e.kind == "delta")


def saved(message_id: int) -> Message:
    return Message.objects.get(pk=message_id)


def ended(answer_id: int, *, timeout: float = 30, what: str | None = None) -> Message:
    """The answer as saved once it has ended (neither pending nor streaming), waiting up to `timeout`."""
    return wait_until(
        lambda: (m := saved(answer_id)).status not in ("pending", "streaming") and m,
        timeout=timeout,
        what=what or f"answer {answer_id} to end",
    )

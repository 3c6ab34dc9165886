"""Small helpers shared by the inference tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from inference.chat_templates import render_chatml
from inference.fleet import NodeView
from inference.loads import EngineLoad
from simulator import tokenizer as tok

#: Simulator flags for answers still running when a test acts: 1,000 tokens each, 10 ms apart.
LONG_ANSWER_ARGS = ("--decode-step-time", "0.01", "--min-answer-tokens", "1000", "--max-answer-tokens", "1000")

SYSTEM = (
    "You are a careful assistant for a small team. Answer briefly, with plain words, and say when "
    "you are not sure. Keep a steady tone, and never invent a number you do not know."
)


@dataclass
class Collected:
    """Everything a stream yielded."""

    events: list[Any] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events)

    @property
    def finish_reason(self) -> str:
        reasons = [e.finish_reason for e in self.events if e.finish_reason]
        assert len(reasons) == 1, f"expected exactly one finish, got {reasons}"
        return reasons[0]

    @property
    def usage(self) -> Any:
        usages = [e.usage for e in self.events if e.usage is not None]
        return usages[-1] if usages else None


async def collect(client: Any, request: Any) -> Collected:
    out = Collected()
    async for event in client.generate_stream(request):
        out.events.append(event)
    return out


def chat(*user_turns: str, system: str = SYSTEM) -> list[dict[str, str]]:
    """A conversation: the system prompt, then alternating user/assistant turns ending with a user turn."""
    messages = [{"role": "system", "content": system}]
    for i, text in enumerate(user_turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return messages


def prompt_ids(messages: list[Mapping[str, Any]]) -> list[int]:
    """The token ids the simulator sees for a chat (its tokenizer, the ChatML template)."""
    return tok.encode(render_chatml(messages))


def node_view(
    name: str,
    *,
    models: tuple[str, ...] = ("sim-small",),
    load: EngineLoad | None = None,
    health: str = "up",
    group: str = "default",
    weight: int = 100,
    enabled: bool = True,
    draining: bool = False,
) -> NodeView:
    """A node as routing, admission and the dashboard read it from the fleet snapshot, at
    http://<name>:30000; `load` is its fresh load sample (None: none, or a stale one)."""
    return NodeView(
        name=name,
        base_url=f"http://{name}:30000",
        api_key="",
        models=tuple(models),
        group=group,
        weight=weight,
        enabled=enabled,
        draining=draining,
        health=health,
        load=load,
    )


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def expected_cached(cached_seq: list[int], prompt: list[int], page_size: int = 1) -> int:
    """SGLang's rule: the match is capped at prompt_len - 1 and rounded down to whole pages."""
    n = min(common_prefix(cached_seq, prompt), len(prompt) - 1)
    return n - n % page_size


def flush_cache(url: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0) -> None:
    """POST /flush_cache, retrying while the worker finishes what it is doing (it refuses unless idle)."""
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.post(f"{url}/flush_cache", headers=headers or {}, timeout=5)
        if response.status_code == 200:
            return
        assert time.monotonic() < deadline, f"flush_cache kept answering {response.status_code}"
        time.sleep(0.05)


async def until(predicate: Callable[[], bool], *, timeout: float = 15.0, what: str = "the condition") -> None:
    """Wait (asynchronously) until ``predicate()`` holds; fail with ``what`` after a generous deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)

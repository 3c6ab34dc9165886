"""Completions that keep no chat message: a program's (`/v1/chat/completions`) and the product's own
work on a conversation (its title, its running summary).

A program sends the whole conversation with every request and reads the answer as it comes; there is
no page to come back to. So its completion is not saved as messages (that would keep, for ever, text
the program never asked us to keep, and double the writes of every call): the one ledger row is its
record, written when it ends, and the caller that asked is its only reader (`Completion`). When that
caller goes away, its stop is set: the engine request is aborted and what was written is billed, by
the same driver and the same rules as a chat answer (`chat.generation.run`).

The product's own work is admitted with the lowest priority (shed first, behind every person's
request in the engine's queue) and takes an admission place like any generation; it is billed to
nobody, and what it costs is counted in the metrics under its purpose ("title", "summary").
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from django.db import DatabaseError

from accounts.models import ApiKey, User
from billing import services as billing
from chat.generation import run, settle
from chat.generation.admit import admit_internal, admit_prompt, holding
from chat.generation.assemble import Prompt, check_fits
from chat.generation.engine import Usage, route_job
from chat.generation.settle import Ending
from chat.generation.turn import ANSWER, TurnContext, resolve_turn
from chat.tokens import estimate_message_tokens

log = logging.getLogger(__name__)


@dataclass
class Ask:
    """What a program asked for: the messages (every one is sent; none is dropped) and how to sample."""

    model: str
    messages: list[dict]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None


class Completion:
    """The destination of a completion with one reader: text is handed to it as it comes (coalesced
    while the reader is busy), and the end after the text. The bill is the ledger row alone."""

    durable = False
    busy_wait_seconds = 0.0
    message_id = None

    def __init__(self, transport: str, *, api_key_id: int | None = None, period=None) -> None:
        self.transport = transport
        self.api_key_id = api_key_id
        self.period = period
        self.generation: run.Generation | None = None
        self._pending: list[str] = []
        self._ending: Ending | None = None
        self._changed = asyncio.Event()

    # -- what the driver calls ---------------------------------------------------------------------

    async def opened(self) -> bool:
        return False

    async def text(self, chunk: str) -> None:
        self._pending.append(chunk)
        self._changed.set()

    async def busy(self, seconds: float) -> None:  # never waits (busy_wait_seconds is 0)
        return None

    async def beat(self, text: str, reported: Usage | None) -> bool:
        return False

    async def close(self, ending: Ending) -> bool:
        generation = self.generation
        try:
            if generation is not None and generation.reservation is not None:
                await settle.write_retrying(
                    f"settling completion {generation.job.rid}",
                    settle.bill,
                    generation.reservation,
                    ending.usage,
                    model=generation.job.model,
                    node=generation.job.node,
                    generation_id=f"api:{generation.job.rid}",
                    api_key_id=self.api_key_id,
                    user=generation.turn.user,
                    period=self.period,
                )
        except DatabaseError:
            # Already logged by write_retrying; the reservation lapses. The caller still gets its answer.
            pass
        finally:
            self._ending = ending
            self._changed.set()
        return True

    # -- what the reader calls ---------------------------------------------------------------------

    async def next(self) -> str | Ending:
        """The text written since the last call (all of it, as one piece), or the end once the text
        is all read."""
        while True:
            if self._pending:
                text = "".join(self._pending)
                self._pending.clear()
                return text
            if self._ending is not None:
                return self._ending
            self._changed.clear()
            await self._changed.wait()

    async def pieces(self) -> AsyncIterator[str]:
        """The text as it comes, until the end (then read `ending`)."""
        while isinstance(item := await self.next(), str):
            yield item

    @property
    def ending(self) -> Ending | None:
        return self._ending


def _given_prompt(turn: TurnContext, messages: list[dict]) -> Prompt:
    """A program's messages as they are: nothing is left out, so every one must fit, with room for the answer."""
    tokens = sum(estimate_message_tokens(m["content"]) for m in messages)
    check_fits(turn, tokens, what="The messages", param="messages")
    return Prompt(messages=messages, estimated_tokens=tokens, dropped=[])


def _generation(admitted, job, destination: Completion) -> run.Generation:
    generation = run.Generation(turn=admitted.turn, job=job, reservation=admitted.reservation, destination=destination)
    destination.generation = generation
    return generation


def start_completion(key: ApiKey, ask: Ask, *, ip: str | None = None, routing_key: str | None = None) -> run.Generation:
    """Admit and route a program's completion (synchronous; one worker-thread hop). `routing_key`
    keeps a program's conversation on the node that has its prefix cached. Raises a Refusal."""
    turn = resolve_turn(key.user, ask.model, max_output_tokens=ask.max_tokens, api_key_id=key.pk, ip=ip)
    billing.check_api_keys_allowed(turn.plan)
    question = next((m["content"] for m in reversed(ask.messages) if m["role"] == "user"), "")
    admitted = admit_prompt(turn, question=question, prompt_for=lambda t: _given_prompt(t, ask.messages))
    with holding(admitted):
        job = route_job(
            admitted.job(
                routing_key=routing_key, temperature=ask.temperature, top_p=ask.top_p, stop=ask.stop, seed=ask.seed
            )
        )
    return _generation(admitted, job, Completion("api", api_key_id=key.pk, period=admitted.turn.billing))


def start_internal(user: User, model: str, prompt: str, *, max_tokens: int, purpose: str) -> run.Generation:
    """Admit and route the product's own work for `user`'s conversation (a title, a summary). Raises
    a Refusal: the user may no longer use the model, or the engines are too busy for it."""
    if purpose == ANSWER:
        raise ValueError("the product's own work has a purpose of its own")
    turn = dataclasses.replace(resolve_turn(user, model), purpose=purpose, max_output_tokens=max_tokens)
    messages = [{"role": "user", "content": prompt}]
    admitted = admit_internal(
        turn, Prompt(messages=messages, estimated_tokens=estimate_message_tokens(prompt), dropped=[])
    )
    with holding(admitted):
        job = route_job(admitted.job(routing_key=None, temperature=0.2))
    return _generation(admitted, job, Completion(purpose))

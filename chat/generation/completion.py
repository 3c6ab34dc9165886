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
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError

from accounts.models import ApiKey, User
from billing import services as billing
from chat.generation import auto_route, run, settle
from chat.generation.admit import admit_internal, admit_prompt, holding
from chat.generation.assemble import Prompt, check_fits
from chat.generation.engine import Usage, route_job
from chat.generation.response_cache import Sampling
from chat.generation.settle import Ending
from chat.generation.turn import ANSWER, EVAL, TurnContext, UnknownModel, resolve_turn
from config.tokens import estimate_message_tokens
from inference import capabilities, images
from inference.catalogue import get_model
from inference.events import ChoiceDelta, merged_deltas

log = logging.getLogger(__name__)


@dataclass
class Ask:
    """What a program asked for: the messages (every one is sent; none is dropped) and how to sample.

    `engine_fields` are the OpenAI fields passed to the engine as they are (tools, response_format,
    logprobs, penalties, SGLang's extensions); `choices` is `n`, how many answers to write."""

    model: str
    messages: list[dict]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    seed: int | None = None
    engine_fields: dict[str, Any] = field(default_factory=dict)
    choices: int = 1
    #: The definitions of the tools offered, counted in the prompt as the engine renders them.
    tools: list[dict] = field(default_factory=list)
    #: A raw prompt to continue (a text completion) instead of messages: sent with no chat template.
    prompt: str | None = None
    #: The program's Cache-Control for the response cache ("", "no-cache" or "no-store").
    cache_control: str = ""


@dataclass
class Choice:
    """One choice as written so far: its text, its tool calls (assembled from their deltas, by the
    call's index), its tokens' logprobs and the engine's finish."""

    index: int
    parts: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    logprobs: list[dict] = field(default_factory=list)
    finish_reason: str | None = None

    @property
    def content(self) -> str:
        return "".join(self.parts)

    def add(self, delta: ChoiceDelta) -> None:
        if delta.content:
            self.parts.append(delta.content)
        self.logprobs.extend(delta.logprobs)
        for call in delta.tool_calls:
            position = call.get("index", len(self.tool_calls))
            whole = self.tool_calls.setdefault(
                position, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}}
            )
            if call.get("id"):
                whole["id"] = call["id"]
            function = call.get("function") or {}
            if function.get("name"):
                whole["function"]["name"] = function["name"]
            whole["function"]["arguments"] += function.get("arguments") or ""
        if delta.finish_reason:
            self.finish_reason = delta.finish_reason


class Completion:
    """The destination of a completion with one reader: what is written is handed to it as it comes
    (coalesced while the reader is busy), and the end after it. The bill is the ledger row alone.

    Each piece is a `ChoiceDelta` (plain text is choice 0's content); `choices` keeps every choice
    as assembled so far, for an answer given whole."""

    durable = False
    busy_wait_seconds = 0.0
    message_id = None

    def __init__(self, transport: str, *, api_key_id: int | None = None, period=None) -> None:
        self.transport = transport
        self.api_key_id = api_key_id
        self.period = period
        self.generation: run.Generation | None = None
        self.choices: dict[int, Choice] = {}
        self._pending: list[ChoiceDelta] = []
        self._ending: Ending | None = None
        self._changed = asyncio.Event()

    # -- what the driver calls ---------------------------------------------------------------------

    async def opened(self) -> bool:
        return False

    async def text(self, chunk: str, deltas: tuple[ChoiceDelta, ...] = ()) -> None:
        pieces = deltas or (ChoiceDelta(content=chunk),)
        for piece in pieces:
            choice = self.choices.get(piece.index)
            if choice is None:
                choice = self.choices[piece.index] = Choice(piece.index)
            choice.add(piece)
        self._pending.extend(pieces)
        self._changed.set()

    async def busy(self, seconds: float) -> None:  # never waits (busy_wait_seconds is 0)
        return None

    async def follow_up(self) -> None:  # a completion's conversation is the program's own
        return None

    async def beat(self, text: str, reported: Usage | None) -> bool:
        return False

    async def close(self, ending: Ending, holds: settle.Holds) -> bool:
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
                    auto_route=generation.turn.auto_route,
                    counters=holds.counters,
                )
        except DatabaseError:
            # Already logged by write_retrying; the reservation lapses. The caller still gets its answer.
            pass
        finally:
            try:
                # Before the program has its answer: its next request finds the quota settled, the place free.
                await settle.give_back(holds)
            finally:
                self._ending = ending  # whatever happened, the reader is not left waiting
                self._changed.set()
        return True

    # -- what the reader calls ---------------------------------------------------------------------

    async def next_pieces(self) -> list[ChoiceDelta] | Ending:
        """What was written since the last call (consecutive text of one choice as one piece), or the
        end once everything is read."""
        while True:
            if self._pending:
                # A reader that fell behind gets each choice once, not fifty pieces.
                pieces, self._pending = list(merged_deltas(self._pending)), []
                return pieces
            if self._ending is not None:
                return self._ending
            self._changed.clear()
            await self._changed.wait()

    @property
    def ending(self) -> Ending | None:
        return self._ending


def _message_text(message: dict) -> str:
    """What of a message the engine reads as text: its content (text parts) and any tool calls it made."""
    text = images.content_text(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        text += f"{function.get('name', '')}{function.get('arguments', '')}"
    return text


def _given_prompt(turn: TurnContext, ask: Ask) -> Prompt:
    """A program's messages (or raw prompt) as they are: nothing is left out, so all of it must fit,
    with room for the answer. The tools offered are part of the prompt (the template renders them)."""
    if ask.prompt is not None:
        tokens = estimate_message_tokens(ask.prompt)
        check_fits(turn, tokens, what="The prompt", param="prompt")
        return Prompt(messages=[{"role": "user", "content": ask.prompt}], estimated_tokens=tokens, dropped=[])
    tokens = sum(estimate_message_tokens(_message_text(m)) for m in ask.messages)
    # An upper bound for the images (inference.images); the ledger bills what the engine counts.
    tokens += images.reserved_image_tokens(ask.messages)
    if ask.tools:
        tokens += estimate_message_tokens(json.dumps(ask.tools))
    check_fits(turn, tokens, what="The messages", param="messages")
    return Prompt(messages=ask.messages, estimated_tokens=tokens, dropped=[])


def _generation(admitted, job, destination: Completion) -> run.Generation:
    generation = run.Generation(turn=admitted.turn, job=job, reservation=admitted.reservation, destination=destination)
    destination.generation = generation
    return generation


def start_completion(
    key: ApiKey, ask: Ask, *, ip: str | None = None, routing_key: str | None = None, needs: dict[str, str] | None = None
) -> run.Generation:
    """Admit and route a program's completion (synchronous; one worker-thread hop). `routing_key`
    keeps a program's conversation on the node that has its prefix cached; `needs` maps each parameter
    the request uses to the capability it needs (checked on the model that will answer, which for Auto
    is known only once it has chosen). Raises a Refusal."""
    turn = resolve_turn(key.user, ask.model, max_output_tokens=ask.max_tokens, api_key_id=key.pk, ip=ip)
    billing.check_api_keys_allowed(turn.plan)
    billing.check_choices(turn.plan, ask.choices)
    pictures = images.has_images(ask.messages)
    if pictures:
        billing.check_images_allowed(turn.plan)
    turn = dataclasses.replace(turn, choices=ask.choices)
    # Input moderation reads the last user message's text (its text parts); images are not screened.
    question = ask.prompt or next(
        (images.content_text(m["content"]) for m in reversed(ask.messages) if m["role"] == "user"), ""
    )
    sampling = Sampling(
        temperature=ask.temperature,
        top_p=ask.top_p,
        stop=ask.stop,
        seed=ask.seed,
        engine_fields=ask.engine_fields or None,
        prompt=ask.prompt,
        cache_control=ask.cache_control,
    )
    needs = needs or {}
    admitted = admit_prompt(
        turn,
        question=question,
        prompt_for=lambda t: _given_prompt(t, ask),
        sampling=sampling,
        needs=[*needs.values(), *(["images"] if pictures else [])],
    )
    with holding(admitted):
        if admitted.turn.model.id != ask.model:  # Auto chose it: what it cannot do is refused by name
            capabilities.check(admitted.turn.model.id, needs)
            if pictures:
                capabilities.check_images(admitted.turn.model.id)
        job = route_job(admitted.job(routing_key=routing_key))
    return _generation(admitted, job, Completion("api", api_key_id=key.pk, period=admitted.turn.billing))


def start_internal(user: User, model: str, prompt: str, *, max_tokens: int, purpose: str) -> run.Generation:
    """Admit and route the product's own work for `user`'s conversation (a title, a summary). Raises
    a Refusal: the user may no longer use the model, or the engines are too busy for it."""
    if purpose == ANSWER:
        raise ValueError("the product's own work has a purpose of its own")
    turn = auto_route.for_product_work(resolve_turn(user, model))
    turn = dataclasses.replace(turn, purpose=purpose, max_output_tokens=max_tokens)
    messages = [{"role": "user", "content": prompt}]
    admitted = admit_internal(
        turn, Prompt(messages=messages, estimated_tokens=estimate_message_tokens(prompt), dropped=[])
    )
    with holding(admitted):
        job = route_job(admitted.job(routing_key=None, temperature=0.2))
    return _generation(admitted, job, Completion(purpose))


def start_evaluation(
    user: User, model_id: str, messages: list[dict], *, node_group: str | None, max_tokens: int
) -> run.Generation:
    """Admit and route one item of an evaluation, asked by staff (`user`): the product's own work on one
    version of a model (its node group; None: wherever the model's traffic goes), whatever the staff
    member's plan allows. Admitted at the lowest priority (shed first at busy times, behind every
    person's request in the engine's queue), sampled greedily, billed to nobody. Raises a Refusal: the
    engines are too busy for it (Busy), or no node of that version can take it (NoNodeAvailable)."""
    model = get_model(model_id)
    if model is None:
        raise UnknownModel(f"There is no model called {model_id}.", model=model_id)
    turn = TurnContext(
        user=user, billing=billing.current_period(user), model=model, max_output_tokens=max_tokens, purpose=EVAL
    )
    estimated = sum(estimate_message_tokens(images.content_text(m["content"])) for m in messages)
    admitted = admit_internal(turn, Prompt(messages=messages, estimated_tokens=estimated, dropped=[]))
    with holding(admitted):
        job = admitted.job(routing_key=None, temperature=0.0)
        job.node_group = node_group
        job = route_job(job)
    return _generation(admitted, job, Completion(EVAL))

"""Admit: every check a new generation must pass before anything is saved or sent, cheapest first,
and the holds it then keeps until it is settled.

Every generation is admitted in one order, whatever asked for it (`admit_prompt`): the model that
will serve it (Auto's choice for a turn that asked for Auto, then a plan's fallback when the model's
engines are busy), its prompt fitted to that model's window (413 when it never can), then the screening
(`screen`: the rate limit, input moderation), the response cache (an answer it already has, for the same
request or for a similar first question, skips the admission place: chat.generation.response_cache,
semantic_cache), then the holds (`hold`: admission control and the quota reservation). Each refusal is
a `config.refusals.Refusal`; a refused request holds nothing. An admitted one holds two things, its
admission place and its quota reservation, which `holding` gives back if anything fails before the
driver takes them over (the driver settles them on every ending). The product's own work (titles,
summaries) takes an admission place and nothing else (`admit_internal`).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from billing import services as billing
from billing.pricing import billable_cached_answer
from chat.generation import admission, auto_route, response_cache, semantic_cache
from chat.generation.assemble import Prompt
from chat.generation.engine import Job
from chat.generation.response_cache import NO_SAMPLING, CachedAnswer, Lookup, Sampling
from chat.generation.turn import TurnContext
from config.refusals import Busy, scheduled
from inference.priority import engine_priority
from moderation.services import check_input


def screen(turn: TurnContext, text: str) -> None:
    """The checks that cost nothing of the fleet: the rate limit (429), then input moderation (400)."""
    billing.check_rate_limit(
        user=turn.user,
        plan=turn.plan,
        api_key_id=turn.api_key_id,
        ip=turn.ip,
        scope=billing.API_SCOPE if turn.api_key_id is not None else billing.CHAT_SCOPE,
    )
    check_input(turn.user, text)


def hold(
    turn: TurnContext, *, prompt_tokens: int, generation_id: str, cached: CachedAnswer | None = None
) -> billing.Reservation:
    """Once the request is screened: admission control by priority (503), then the quota reservation for
    the prompt plus a whole answer for each choice (429), which also refuses one answer more than the
    plan's answers at once (429). Returns the reservation; the generation holds an admission lease under
    `generation_id` until it ends. An answer the response cache has (`cached`) takes no admission place
    (no engine runs), and reserves what the plan bills for it."""
    if cached is None:
        with scheduling(turn):
            admission.admit_request(turn, generation_id)
        amount = prompt_tokens + turn.max_output_tokens * turn.choices
    else:
        amount = billable_cached_answer(cached.prompt_tokens, cached.completion_tokens, plan=turn.plan)
    try:
        with scheduling(turn):
            return billing.reserve_quota(
                turn.user,
                amount,
                model=turn.model.id,
                api_key_id=turn.api_key_id,
                period=turn.billing,
                prompt_tokens=prompt_tokens,
            )
    except BaseException:
        admission.release_now(generation_id)
        raise


@dataclass
class Admitted:
    """A generation that passed every check: the turn as it will run, its prompt, its engine request
    id (also its admission place) and its quota reservation."""

    turn: TurnContext
    prompt: Prompt
    rid: str
    reservation: billing.Reservation | None
    sampling: Sampling = NO_SAMPLING
    #: What the response cache said: the key to keep the answer under, or the answer it has.
    cache: Lookup = field(default_factory=Lookup)

    def job(self, *, routing_key: str | None, temperature: float | None = None) -> Job:
        """The engine request for it (not yet routed), sampled as admitted (`temperature`: the product's
        own work, which is never cached, sets its own)."""
        sampling = self.sampling
        return Job(
            model=self.turn.model.id,
            rid=self.rid,
            messages=self.prompt.messages,
            max_tokens=self.turn.max_output_tokens,
            prompt_estimate=self.prompt.estimated_tokens,
            routing_key=routing_key,
            priority=engine_priority(self.turn.priority),
            temperature=temperature if temperature is not None else sampling.temperature,
            top_p=sampling.top_p,
            stop=sampling.stop,
            seed=sampling.seed,
            engine_fields=sampling.engine_fields,
            prompt=sampling.prompt,
            continues_answer=sampling.continuation,
            cache_key=self.cache.key if self.cache.keep else None,
            cached=self.cache.hit,
            cache_hit=self.cache.hit_kind,
            similar_slot=self.cache.slot,
            cache_version=self.cache.version,
        )


def admit_prompt(
    turn: TurnContext,
    *,
    question: str,
    prompt_for: Callable[[TurnContext], Prompt],
    sampling: Sampling = NO_SAMPLING,
    needs: Collection[str] = (),
    first_question: bool = True,
    fallback: bool = True,
) -> Admitted:
    """Admit one generation, in the one order: the serving model (Auto's choice first, when the turn
    asked for Auto; then a plan's fallback when its engines are busy), its prompt (`prompt_for(turn)`,
    which refuses what can never fit), the screening of `question` (rate limit, input moderation), the
    response cache (an answer it has, for this request or for a similar first question, needs no
    admission place), then the holds (admission place, quota). Before all of it, a request no cache
    may answer is refused at once when the count of answers in flight says admission would refuse it.
    `needs`: the capabilities the request's parameters need (a program's tools, response format,
    pictures), which Auto honours. `first_question`: a chat's first turn (the semantic cache may answer
    it). `fallback`: a plan's fallback model may answer when the model's engines are busy (not when the
    answer must be the same model's: a continuation)."""
    with scheduling(turn):  # at busy times, refused before the work below
        admission.refuse_early(
            turn, unless=lambda: semantic_cache.a_cache_may_answer(turn, sampling, first_question=first_question)
        )
    built: dict[tuple[str, int], Prompt] = {}

    def prompt_once(serving: TurnContext) -> Prompt:
        # Auto assembles the large model's prompt to choose; when it chooses that model, it is this one.
        key = (serving.model.id, serving.max_output_tokens)
        if key not in built:
            built[key] = prompt_for(serving)
        return built[key]

    chosen = auto_route.choose(turn, question=question, prompt_for=prompt_once, needs=needs)
    turn = chosen if auto_route.rule_decided(chosen) or not fallback else admission.serve_model(chosen)
    if chosen.auto_route and turn.model.id != chosen.model.id:
        turn = dataclasses.replace(turn, auto_route=auto_route.FALLBACK)
    prompt = prompt_once(turn)
    rid = uuid.uuid4().hex
    screen(turn, question)
    # After the screening: a refused request costs no embedding of its question.
    cache = response_cache.look_up(turn, prompt.messages, sampling)
    cache = semantic_cache.look_up(turn, prompt, sampling, cache)
    reservation = hold(turn, prompt_tokens=prompt.estimated_tokens, generation_id=rid, cached=cache.hit)
    response_cache.counted(cache)
    semantic_cache.counted(cache)
    if not (sampling.regenerate or sampling.continuation):
        auto_route.remember(turn, question, prompt)
    return Admitted(turn=turn, prompt=prompt, rid=rid, reservation=reservation, sampling=sampling, cache=cache)


def admit_internal(turn: TurnContext, prompt: Prompt) -> Admitted:
    """The product's own work (a title, a summary): an admission place, shed before any person's
    request at busy times (503), and no rate limit, moderation or quota: the person did not ask."""
    rid = uuid.uuid4().hex
    admission.admit_request(turn, rid)
    return Admitted(turn=turn, prompt=prompt, rid=rid, reservation=None)


def release_holds(reservation: billing.Reservation | None, generation_id: str) -> None:
    """Give back an admitted generation's quota hold and admission place (it will not run)."""
    try:
        if reservation is not None:
            billing.release(reservation)
    finally:
        admission.release_now(generation_id)


@contextmanager
def scheduling(turn: TurnContext) -> Iterator[None]:
    """A "busy" refusal leaves with the waits before each retry for this turn's class of request."""
    try:
        yield
    except Busy as busy:
        scheduled(busy, premium=turn.priority == admission.PREMIUM)
        raise


@contextmanager
def holding(admitted: Admitted) -> Iterator[Admitted]:
    """Until the generation is handed to the driver: any failure (a refusal, a database error, a
    cancelled request) gives its holds back before it propagates (a busy one with its waits)."""
    try:
        with scheduling(admitted.turn):
            yield admitted
    except BaseException:
        release_holds(admitted.reservation, admitted.rid)
        raise

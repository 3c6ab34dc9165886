"""A turn's context: who asks, under which plan and period, of which model, within which limits.

Worked out once when a request arrives (one cached lookup of the billing period) and handed down:
the rate limit, admission control, the context budget, the quota reservation, persistence and
prompt assembly all read it, and nothing after this looks the plan up again. The web chat and the
API build the same context, so a limit means the same on both.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import translation
from django.utils.translation import gettext as _

from accounts.models import User
from accounts.standing import check_account
from billing import services as billing
from billing.models import Plan
from billing.selectors import BillingPeriod, context_window
from config.refusals import BadInput
from config.text import shown
from inference.catalogue import ModelInfo, available_models, get_model


class UnknownModel(BadInput):
    """A model id the product does not offer (the API answers it as OpenAI does: 404 model_not_found)."""


#: What a generation is for: a person's answer (web chat or API), or the product's own work on a
#: conversation (its title, its running summary), which the person never asked for and never pays for.
ANSWER, TITLE, SUMMARY = "answer", "title", "summary"
#: The product's own work for staff: an item of an evaluation, sent to one version of a model (evals).
EVAL = "eval"
#: The priority class of the product's own work: below every plan's, shed first at busy times.
INTERNAL = "internal"


@dataclass(frozen=True)
class TurnContext:
    user: User
    billing: BillingPeriod
    model: ModelInfo
    #: The room kept for the answer, and the most it may use (see `answer_room`).
    max_output_tokens: int
    api_key_id: int | None = None
    ip: str | None = None
    #: The user's personal system prompt, for web chat turns only (see `resolve_turn`).
    custom_instructions: str = ""
    #: The language the person reads the product in (web chat turns only): the model is told to answer
    #: in it when their message does not make another clear (chat.generation.assemble.system_prompts).
    language: str = ""
    #: ANSWER, or the product's own work: the TITLE or SUMMARY of a conversation, an EVAL item.
    purpose: str = ANSWER
    #: How many answers the request writes (an API caller's n); each is reserved as a whole answer.
    choices: int = 1
    #: Why Auto chose `model` (chat.generation.auto_route: "easy", "hard", "images"...); "" when the
    #: person chose the model, "escalated" for a retry on the larger model under an Auto answer.
    auto_route: str = ""
    #: A program asked for `max_output_tokens` itself (max_tokens): kept whichever model Auto picks.
    answer_tokens_asked: bool = False

    @property
    def plan(self) -> Plan:
        return self.billing.plan

    @property
    def priority(self) -> str:
        """The class admission and the engine's queue know this request by: its plan's, or INTERNAL
        for the product's own work."""
        return self.plan.priority_class if self.purpose == ANSWER else INTERNAL

    @property
    def context_window(self) -> int:
        """The tokens one request may hold (prompt and answer): the smaller of the plan's and the model's."""
        return context_window(self.plan, self.model)

    @property
    def prompt_budget(self) -> int:
        """The most the prompt may use, leaving room for a whole answer."""
        return max(self.context_window - self.max_output_tokens, 0)


def answer_room(plan: Plan, model: ModelInfo, requested: int | None = None) -> int:
    """The tokens kept for an answer: what an API caller asked for (max_tokens), or else the plan's
    longest answer, but never more than half the context window, so the prompt keeps the other half."""
    if requested is not None:
        return requested
    return min(plan.max_output_tokens, context_window(plan, model) // 2)


def default_model(plan: Plan, preferred: str = "") -> ModelInfo:
    """The model a new chat starts with: the user's `preferred` one (their setting) while the plan
    allows it, else the first offered model the plan may use (the first offered one if it allows none)."""
    allowed = set(billing.plan_model_ids(plan))
    offered = available_models()
    if preferred:
        chosen = next((model for model in offered if model.id == preferred and model.id in allowed), None)
        if chosen is not None:
            return chosen
    return next((model for model in offered if model.id in allowed), offered[0])


def resolve_turn(
    user: User,
    model_id: object = None,
    *,
    max_output_tokens: int | None = None,
    api_key_id: int | None = None,
    ip: str | None = None,
) -> TurnContext:
    """The context of one request, or the refusal that ends it: a suspended account (403), an unknown
    model (UnknownModel, 400), a model outside the plan (403), or more answer tokens than the plan
    allows (400). `max_output_tokens` is what an API caller asked for, if it did.

    The user's custom instructions are part of a web chat turn (read here, with the user, so they
    cost no query of their own). An API call (`api_key_id`) never gets them: OpenAI-compatible callers
    send their own system messages, and a program's behaviour must not change with a chat setting."""
    check_account(user)
    period = billing.current_period(user)
    plan = period.plan
    if model_id is None or model_id == "":
        model = default_model(plan, user.default_model)
    else:
        model = get_model(model_id) if isinstance(model_id, str) else None
        if model is None:
            raise UnknownModel(
                _("There is no model called %(model)s.") % {"model": shown(model_id)}, model=model_id, param="model"
            )
    billing.check_model_allowed(plan, model.id)
    if max_output_tokens is not None and max_output_tokens > plan.max_output_tokens:
        raise BadInput(
            f"max_tokens is {max_output_tokens}, but the {plan.name} plan allows at most "
            f"{plan.max_output_tokens} tokens per answer.",
            param="max_tokens",
        )
    return TurnContext(
        user=user,
        billing=period,
        model=model,
        max_output_tokens=answer_room(plan, model, max_output_tokens),
        answer_tokens_asked=max_output_tokens is not None,
        api_key_id=api_key_id,
        ip=ip,
        custom_instructions=user.custom_instructions if api_key_id is None else "",
        # The page's language (the person's own, or their browser's), for the web chat's answers only.
        language=(translation.get_language() or "") if api_key_id is None else "",
    )

"""What a plan lets its user do, as checks that refuse with a reason.

They take the plan, not the user: the caller has already worked out the plan once for the request
(chat.generation.turn) and passes it down.
"""

from __future__ import annotations

from billing import selectors
from billing.models import Plan
from config.refusals import BadInput, NotAllowed


def check_model_allowed(plan: Plan, model: str) -> None:
    """Raise NotAllowed (403) naming the plan that includes `model` when `plan` does not."""
    if model in selectors.plan_model_ids(plan):
        return
    better = selectors.cheapest_plan_allowing(model)
    if better is None:
        raise NotAllowed(f"The model {model} is not available on any plan.", plan=plan.slug)
    raise NotAllowed(
        f"The model {model} is not included in the {plan.name} plan. Upgrade to {better.name} to use it.",
        plan=plan.slug,
        upgrade=better.slug,
    )


def check_api_keys_allowed(plan: Plan) -> None:
    """Raise NotAllowed (403) naming the plan that includes API keys when `plan` does not."""
    if plan.allows_api_keys:
        return
    better = next((p for p in selectors.public_plans() if p.allows_api_keys), None)
    suffix = f" Upgrade to {better.name} to create them." if better else ""
    raise NotAllowed(f"API keys are not included in the {plan.name} plan.{suffix}", plan=plan.slug)


def check_choices(plan: Plan, choices: int) -> None:
    """Raise BadInput (400, param n) when a request asks for more answers at once than `plan` allows."""
    if choices <= plan.max_choices:
        return
    raise BadInput(
        f"n is {choices}, but the {plan.name} plan allows at most {plan.max_choices} choices per request.",
        param="n",
    )


def check_images_allowed(plan: Plan) -> None:
    """Raise NotAllowed (403) naming the plan that allows images when `plan` does not."""
    if plan.allows_images:
        return
    better = next((p for p in selectors.public_plans() if p.allows_images), None)
    suffix = f" Upgrade to {better.name} to send them." if better else ""
    raise NotAllowed(
        f"Images are not included in the {plan.name} plan.{suffix}",
        plan=plan.slug,
        **({"upgrade": better.slug} if better else {}),
    )

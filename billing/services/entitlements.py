"""What a plan lets its user do, as checks that refuse with a reason."""

from __future__ import annotations

from billing import selectors
from config.refusals import NotAllowed


def check_model_allowed(user, model: str) -> None:
    """Raise NotAllowed (403) naming the plan that includes `model` when the user's plan does not."""
    plan = selectors.effective_plan(user)
    if model in selectors.plan_model_ids(plan):
        return
    better = selectors.cheapest_plan_allowing(model)
    if better is None:
        raise NotAllowed(f"The model {model} is not available on any plan.", plan=plan.slug)
    raise NotAllowed(
        f"The model {model} is not included in the {plan.name} plan. Upgrade to {better.name} to use it.",
        plan=plan.slug, upgrade=better.slug,
    )


def check_api_keys_allowed(user) -> None:
    """Raise NotAllowed (403) naming the plan that includes API keys when the user's plan does not."""
    plan = selectors.effective_plan(user)
    if plan.allows_api_keys:
        return
    better = next((p for p in selectors.public_plans() if p.allows_api_keys), None)
    suffix = f" Upgrade to {better.name} to create them." if better else ""
    raise NotAllowed(f"API keys are not included in the {plan.name} plan.{suffix}", plan=plan.slug)

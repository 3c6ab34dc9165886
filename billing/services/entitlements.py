"""What a plan lets its user do, as checks that refuse with a reason.

They take the plan, not the user: the caller has already worked out the plan once for the request
(chat.generation.turn) and passes it down.
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from billing import selectors
from billing.models import Plan
from config.refusals import BadInput, NotAllowed


def check_model_allowed(plan: Plan, model: str) -> None:
    """Raise NotAllowed (403) naming the plan that includes `model` when `plan` does not."""
    if model in selectors.plan_model_ids(plan):
        return
    better = selectors.cheapest_plan_allowing(model)
    if better is None:
        raise NotAllowed(_("The model %(model)s is not available on any plan.") % {"model": model}, plan=plan.slug)
    raise NotAllowed(
        _("The model %(model)s is not included in the %(plan)s plan. Upgrade to %(better)s to use it.")
        % {"model": model, "plan": plan.name, "better": better.name},
        plan=plan.slug,
        upgrade=better.slug,
    )


def check_api_keys_allowed(plan: Plan) -> None:
    """Raise NotAllowed (403) naming the plan that includes API keys when `plan` does not. Only the API
    asks (a program's request), so its sentence stays English, as the API's own."""
    if plan.allows_api_keys:
        return
    better = next((p for p in selectors.public_plans() if p.allows_api_keys), None)
    suffix = f" Upgrade to {better.name} to create them." if better else ""
    raise NotAllowed(f"API keys are not included in the {plan.name} plan.{suffix}", plan=plan.slug)


def check_choices(plan: Plan, choices: int) -> None:
    """Raise BadInput (400, param n) when a request asks for more answers at once than `plan` allows. Only
    the API asks (OpenAI's n), so its sentence stays English, as the API's own."""
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
    message = _("Images are not included in the %(plan)s plan.") % {"plan": plan.name}
    if better is not None:
        message += " " + _("Upgrade to %(better)s to send them.") % {"better": better.name}
    raise NotAllowed(
        message,
        plan=plan.slug,
        **({"upgrade": better.slug} if better else {}),
    )

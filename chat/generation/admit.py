"""Admit: every check a new answer must pass before anything is saved or sent, cheapest first.

The web chat and the API both call `admit` with the turn's context, so a limit is never applied on
one transport and missed on another. Each refusal is a `config.refusals.Refusal`; a refused request
holds nothing (no admission lease, no quota).
"""

from __future__ import annotations

from billing import services as billing
from chat.generation import admission
from chat.generation.turn import TurnContext
from moderation.services import check_input


def admit(turn: TurnContext, *, text: str, prompt_tokens: int, generation_id: str) -> billing.Reservation:
    """Rate limit (429), input moderation (400 content_policy_violation), admission control by
    priority (503), then the quota reservation for the prompt plus a whole answer (429), which also
    refuses one answer more than the plan's answers at once (429). Returns the
    reservation; the generation holds an admission lease under `generation_id` until it ends."""
    billing.check_rate_limit(
        user=turn.user,
        plan=turn.plan,
        api_key_id=turn.api_key_id,
        ip=turn.ip,
        scope="api" if turn.api_key_id is not None else "chat",
    )
    check_input(turn.user, text)
    admission.admit_request(turn, generation_id)
    try:
        return billing.reserve_quota(
            turn.user,
            prompt_tokens + turn.max_output_tokens,
            model=turn.model.id,
            api_key_id=turn.api_key_id,
            period=turn.billing,
        )
    except BaseException:
        admission.release_now(generation_id)
        raise

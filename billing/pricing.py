"""What a request counts against the quota: the one place the cached-token discount, and the embedding
tokens' discount, are applied."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from billing.models import Plan


def cached_discount_percent(plan: Plan | None) -> int:
    """How much less a cached prompt token counts on `plan`: its own figure, or the product's default."""
    if plan is not None and plan.cached_token_discount_percent is not None:
        return plan.cached_token_discount_percent
    return settings.BILLING_CACHED_TOKEN_DISCOUNT_PERCENT


def billable_tokens(prompt_tokens: int, cached_tokens: int, completion_tokens: int, *, plan: Plan | None = None) -> int:
    """Uncached prompt + completion tokens in full, cached prompt tokens at the plan's discount.

    Integer arithmetic rounding the discounted part up, so the ledger is exact and a fraction of a
    token is never given away.
    """
    if min(prompt_tokens, cached_tokens, completion_tokens) < 0:
        raise ValueError("Token counts cannot be negative.")
    if cached_tokens > prompt_tokens:
        raise ValueError("Cached tokens are part of the prompt, so they cannot outnumber it.")
    weight = 100 - cached_discount_percent(plan)
    cached_charge = -(-cached_tokens * weight // 100)  # ceiling division
    return prompt_tokens - cached_tokens + cached_charge + completion_tokens


def billable_embedding_tokens(input_tokens: int) -> int:
    """An embedding request's input tokens, at BILLING_EMBEDDING_TOKEN_DISCOUNT_PERCENT less than a
    chat's (rounded up, as above: the ledger is exact and no fraction of a token is given away)."""
    if input_tokens < 0:
        raise ValueError("Token counts cannot be negative.")
    weight = 100 - settings.BILLING_EMBEDDING_TOKEN_DISCOUNT_PERCENT
    return -(-input_tokens * weight // 100)


def billable_cached_answer(prompt_tokens: int, completion_tokens: int, *, plan: Plan) -> int:
    """An answer served from the response cache: the plan's share of its tokens (rounded up)."""
    if min(prompt_tokens, completion_tokens) < 0:
        raise ValueError("Token counts cannot be negative.")
    return -(-(prompt_tokens + completion_tokens) * plan.cached_answer_percent // 100)

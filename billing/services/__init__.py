"""Billing's public interface: what every transport (pages, SSE, WebSocket, API) asks before and after
a generation. One rule, one place: the chat app and the API call these and decide nothing themselves.

Plan changes, webhooks and upkeep live in billing.services.subscriptions and
billing.services.stripe_events (imported directly by billing's own views and tasks).
"""

from billing.cache import current_period
from billing.ledger import Closing
from billing.quota_store import CounterUpdate
from billing.selectors import (
    allowed_models,
    context_window,
    context_words,
    default_plan,
    effective_plan,
    plan_embedding_models,
    plan_model_ids,
    plan_models,
)
from billing.services.allowances import check_api_key_allowance, count_new_chat, count_new_shared_link
from billing.services.entitlements import (
    check_api_keys_allowed,
    check_choices,
    check_images_allowed,
    check_model_allowed,
)
from billing.services.files import FileLimit, check_file_upload, check_pages
from billing.services.quota import (
    Reservation,
    TokenWindow,
    reconcile_counters,
    release,
    reserve_quota,
    send_counter_updates,
    settle,
    token_window,
)
from billing.services.rate_limits import (
    API_SCOPE,
    CHAT_SCOPE,
    RequestWindow,
    acheck_rate_limit,
    check_rate_limit,
    request_window,
)

__all__ = [
    "API_SCOPE",
    "CHAT_SCOPE",
    "Closing",
    "CounterUpdate",
    "FileLimit",
    "RequestWindow",
    "Reservation",
    "TokenWindow",
    "acheck_rate_limit",
    "allowed_models",
    "check_api_key_allowance",
    "check_api_keys_allowed",
    "check_choices",
    "check_file_upload",
    "check_images_allowed",
    "check_model_allowed",
    "check_pages",
    "check_rate_limit",
    "context_window",
    "context_words",
    "count_new_chat",
    "count_new_shared_link",
    "current_period",
    "default_plan",
    "effective_plan",
    "plan_embedding_models",
    "plan_model_ids",
    "plan_models",
    "reconcile_counters",
    "release",
    "request_window",
    "reserve_quota",
    "send_counter_updates",
    "settle",
    "token_window",
]

"""Auto: the model choice that picks, per turn, the small or the large model (issue 22, item 3).

Offered when INFERENCE_AUTO_MODEL names the two (inference.catalogue: "Auto" first in the page's picker
and in /v1/models, allowed where the plan allows at least one of them). `choose` runs first in
`admit_prompt`, so the web chat, the WebSocket and `/v1` choose alike. Among the two models the plan
allows (one allowed: that one, "plan"), in order:

1. **Rules.** Pictures in the prompt go to the model whose engines read images ("images"); tools to the one
   whose engines call them ("tools"); a response format to the one whose engines constrain output
   ("format"); a prompt the small model's window cannot hold whole (with room for the answer) to the large
   one ("context"). A plan's fallback model (busy engines) never replaces a rule's choice; it does replace
   a difficulty choice ("fallback").
2. **Difficulty.** Otherwise chat.generation.difficulty scores the question; a score at or above the
   threshold goes to the large model ("hard"), else to the small one ("easy"). The threshold follows the
   staff's target share of large-model turns (console → Chat → Auto model): it is the score that the
   target share of the last AUTO_SCORES_KEPT admitted turns it scored reached (0.5 until AUTO_MIN_SCORES
   were seen; a regeneration is not scored again).

The product's own work on an Auto conversation (its title, its summary) runs on the smaller model the
plan allows (`for_product_work`).

The answer records the model that wrote it and the route (`Message.auto_route`); the page shows "Auto
chose ..." with "Retry with the larger model" (a regeneration on the large model, recorded as
"escalated"); staff see the share sent to each model, the escalations and the thumbs per model.
`sglchat_auto_routes_total{model,route}` counts every choice, the API's too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Collection

from django.core.cache import cache
from redis.exceptions import RedisError

from billing import services as billing
from chat.generation import difficulty
from chat.generation.assemble import Prompt
from chat.generation.turn import TurnContext, answer_room
from chat.models import AutoModelPolicy
from config import metrics
from config.redis import sync_client
from config.refusals import BadInput
from inference import capabilities
from inference.catalogue import AUTO, ModelInfo, auto_models

log = logging.getLogger(__name__)

SCORES = "sglchat:auto-scores"
THRESHOLD_KEY = "auto-threshold"
#: How long a process uses the threshold it worked out before working it out again.
THRESHOLD_SECONDS = 5
AUTO_SCORES_KEPT = 1000
AUTO_MIN_SCORES = 50
POLICY_KEY = "auto-model-policy"
POLICY_SECONDS = 30

PLAN, IMAGES, TOOLS, FORMAT, CONTEXT, HARD, EASY = "plan", "images", "tools", "format", "context", "hard", "easy"
#: The routes a rule decided (the model must be that one), and a plan's fallback taking Auto's choice over.
RULES = frozenset({PLAN, IMAGES, TOOLS, FORMAT, CONTEXT})
FALLBACK = "fallback"
#: The parameter a refusal of pictures names (chat.generation.start: the model does not see them).
PICTURES_PARAM = "document_ids"
#: A regeneration on the larger model, asked for under an Auto answer.
ESCALATED = "escalated"


def target_share() -> float:
    """The staff's target share of Auto's turns for the large model, 0 to 1."""
    found = None
    with contextlib.suppress(RedisError):  # Redis away: the database says
        found = cache.get(POLICY_KEY)
    if found is None:
        row = AutoModelPolicy.objects.order_by("pk").first()
        found = (row.large_share_percent if row else AutoModelPolicy.DEFAULT_LARGE_SHARE) / 100
        with contextlib.suppress(RedisError):
            cache.set(POLICY_KEY, found, POLICY_SECONDS)
    return float(found)


def forget_policy() -> None:
    """Read the target share again, and work the threshold out again, on next use in every process."""
    with contextlib.suppress(RedisError):  # then each copy lapses within POLICY_SECONDS
        cache.delete_many([POLICY_KEY, THRESHOLD_KEY])


def choose(
    turn: TurnContext, *, question: str, prompt_for: Callable[[TurnContext], Prompt], needs: Collection[str] = ()
) -> TurnContext:
    """The turn on the model Auto picks for it (`turn` as it is when its model is not Auto). `needs`: the
    capabilities the request's parameters need (inference.capabilities: "tools", "json_schema", "images")."""
    if turn.model.id != AUTO:
        return turn
    allowed = _allowed(turn)
    if len(allowed) == 1:
        return _on(turn, allowed[0], PLAN)
    small, large = allowed
    try:
        prompt = prompt_for(_on(turn, large, ""))  # refuses what no model can hold
    except BadInput as refusal:
        if refusal.param != PICTURES_PARAM:
            raise
        return _on(turn, small, IMAGES)  # the large model does not see pictures (the small one is asked)
    ruled = _rule(turn, small, large, prompt, {*needs, *(["images"] if _has_pictures(prompt) else [])})
    if ruled is not None:
        return _on(turn, *ruled)
    return _on(turn, large, HARD) if _score(question, prompt) >= threshold() else _on(turn, small, EASY)


def remember(turn: TurnContext, question: str, prompt: Prompt) -> None:
    """Keep the score of an admitted turn that difficulty decided (what the threshold follows): never a
    refused one's, so requests refused by the rate limit or moderation cannot move it."""
    if turn.auto_route in (EASY, HARD):
        _remember(_score(question, prompt))


def for_product_work(turn: TurnContext) -> TurnContext:
    """A title or a summary of an Auto conversation: on the smaller model the plan allows (the product's
    own work, the same for every turn, sized for the window every turn of the chat fits)."""
    if turn.model.id != AUTO:
        return turn
    return _on(turn, _allowed(turn)[0], "")


def rule_decided(turn: TurnContext) -> bool:
    """Auto's choice was a rule's (the model must be that one): no fallback model replaces it."""
    return turn.auto_route in RULES


def _allowed(turn: TurnContext) -> list[ModelInfo]:
    allowed = [m for m in auto_models() or () if m.id in billing.plan_model_ids(turn.plan)]
    if not allowed:  # Auto withdrawn since the turn was resolved: the plan's refusal
        billing.check_model_allowed(turn.plan, AUTO)
    return allowed


def _score(question: str, prompt: Prompt) -> float:
    """The difficulty score, with a millionth of noise: tied scores (small talk scores alike) then fall on
    both sides of a threshold among them, in the target share, rather than all on one side."""
    earlier = sum(1 for m in prompt.messages if m.get("role") in ("user", "assistant")) - 1
    return difficulty.score(question, earlier) + random.random() * 1e-6  # nosec B311  # noise, not a secret


def larger_model_id() -> str | None:
    """The model "Retry with the larger model" asks for, when Auto is offered."""
    pair = auto_models()
    return pair[1].id if pair else None


def _rule(
    turn: TurnContext, small: ModelInfo, large: ModelInfo, prompt: Prompt, needs: set[str]
) -> tuple[ModelInfo, str] | None:
    """The model a rule decides, and the rule; None when none does. A capability the request needs goes
    to the one model whose engines have it (when both or neither have it, no rule decides)."""
    for capability, route in ((IMAGES, IMAGES), ("tools", TOOLS), ("json_schema", FORMAT)):
        if capability in needs:
            able = [m for m in (small, large) if capabilities.of_model(m.id).get(capability) is not False]
            if len(able) == 1:
                return able[0], route
    if prompt.estimated_tokens > _on(turn, small, "").prompt_budget:
        return large, CONTEXT
    return None


def _has_pictures(prompt: Prompt) -> bool:
    return any(
        isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
        for m in prompt.messages
    )


def _on(turn: TurnContext, model: ModelInfo, route: str) -> TurnContext:
    """`turn` on `model`: its answer's room worked out again for it (what a program asked for is kept)."""
    room = turn.max_output_tokens if turn.answer_tokens_asked else answer_room(turn.plan, model)
    if route:
        metrics.AUTO_ROUTES.labels(model.id, route).inc()
    return dataclasses.replace(turn, model=model, max_output_tokens=room, auto_route=route or turn.auto_route)


def threshold() -> float:
    """The score that sends a turn to the large model: the target share's quantile of recent scores."""
    found = None
    with contextlib.suppress(RedisError):
        found = cache.get(THRESHOLD_KEY)
    if found is not None:
        return float(found)
    share = target_share()
    scores = sorted(_recent())
    if share >= 1:
        value = 0.0
    elif share <= 0:
        value = 1.01  # no score reaches it
    elif len(scores) < AUTO_MIN_SCORES:
        value = 0.5
    else:
        # The lowest score among the `share` highest: that share of recent turns was at or above it.
        index = min(max(int(len(scores) * (1 - share)), 0), len(scores) - 1)
        value = scores[index]
    with contextlib.suppress(RedisError):
        cache.set(THRESHOLD_KEY, value, THRESHOLD_SECONDS)
    return value


def _recent() -> list[float]:
    client = sync_client()
    if client is None:
        return _local.scores()
    try:
        return [float(s) for s in client.lrange(SCORES, 0, AUTO_SCORES_KEPT - 1)]
    except RedisError:
        log.warning("could not read Auto's recent scores", exc_info=True)
        return []


def _remember(score: float) -> None:
    client = sync_client()
    if client is None:
        _local.add(score)
        return
    try:
        with client.pipeline(transaction=False) as pipe:
            pipe.lpush(SCORES, round(score, 4))
            pipe.ltrim(SCORES, 0, AUTO_SCORES_KEPT - 1)
            pipe.execute()
    except RedisError:
        log.warning("could not keep Auto's score", exc_info=True)


class _LocalScores:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scores: deque[float] = deque(maxlen=AUTO_SCORES_KEPT)

    def add(self, score: float) -> None:
        with self._lock:
            self._scores.append(score)

    def scores(self) -> list[float]:
        with self._lock:
            return list(self._scores)


_local = _LocalScores()

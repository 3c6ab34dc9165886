"""Background work for chat, on Celery: titles, summaries, and the reaper."""

import logging

from asgiref.sync import async_to_sync
from celery import shared_task

from chat.generation import auto_route
from chat.generation.reap import reap_stalled
from chat.generation.turn import resolve_turn
from chat.models import Conversation
from chat.titles import summarize, title_conversation
from config.refusals import Refusal
from inference.errors import EngineError

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def after_answer(conversation_id: int, ask_model: bool = True) -> None:
    """Give a new conversation a title once its first answer has ended: the model's, or the first words
    of its question when the model is not asked (`ask_model` False) or cannot write one now."""
    try:
        title_conversation(conversation_id, ask_model=ask_model)
    except Refusal as refusal:  # the engines are too busy for the product's own work, or the owner lost the model
        log.info("no title for conversation %s: %s", conversation_id, refusal.message)
    except EngineError as exc:
        log.info("no title for conversation %s: %s", conversation_id, exc)


@shared_task(ignore_result=True)
def summarize_conversation(conversation_id: int) -> None:
    """Cover the turns the next prompt leaves out with a running summary."""
    conversation = Conversation.objects.select_related("owner").filter(pk=conversation_id).first()
    if conversation is None:
        return
    try:
        summarize(conversation, auto_route.for_product_work(resolve_turn(conversation.owner, conversation.model)))
    except Refusal as refusal:  # the owner can no longer use this model (suspended, or a smaller plan)
        log.info("no summary for conversation %s: %s", conversation_id, refusal.message)
    except EngineError as exc:
        log.info("no summary for conversation %s: %s", conversation_id, exc)


@shared_task(ignore_result=True)
def reap_stalled_generations() -> list[int]:
    """Mark generations whose runner died as interrupted (Celery beat, every 30 s)."""
    reaped = async_to_sync(reap_stalled)()
    if reaped:
        log.warning("reaped %d stalled generation(s): %s", len(reaped), reaped)
    return reaped

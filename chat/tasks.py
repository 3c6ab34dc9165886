"""Background work for chat, on Celery: titles, summaries, and the reaper."""

import logging

from asgiref.sync import async_to_sync
from celery import shared_task

from inference.errors import EngineError

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def after_answer(conversation_id: int) -> None:
    """Give a new conversation a title once its first answer is in."""
    from chat.titles import title_conversation

    try:
        title_conversation(conversation_id)
    except EngineError as exc:
        log.info("no title for conversation %s: %s", conversation_id, exc)


@shared_task(ignore_result=True)
def summarize_conversation(conversation_id: int) -> None:
    from billing.services import effective_plan
    from chat.models import Conversation
    from chat.titles import summarize

    conversation = Conversation.objects.select_related("owner").filter(pk=conversation_id).first()
    if conversation is None:
        return
    try:
        summarize(conversation_id, effective_plan(conversation.owner))
    except EngineError as exc:
        log.info("no summary for conversation %s: %s", conversation_id, exc)


@shared_task(ignore_result=True)
def reap_stalled_generations() -> list[int]:
    """Mark generations whose runner died as interrupted (Celery beat, every 30 s)."""
    from chat.reaper import reap_stalled

    reaped = async_to_sync(reap_stalled)()
    if reaped:
        log.warning("reaped %d stalled generation(s): %s", len(reaped), reaped)
    return reaped

"""Writes for the chat app: every transport (page, SSE, WebSocket, API) goes through these.

`start_turn` is the path of one message up to the engine: admit (suspension, input checks, rate
limit, model allowed, moderation, quota reservation, admission control), then persist the user's
message and the assistant's placeholder in one transaction. Starting the generation itself is
`chat.generation.send_message`, which calls this and hands the result to the runner.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import User
from billing import services as billing
from chat import selectors
from chat.context import estimate_prompt_tokens
from chat.models import Conversation, Message
from config.refusals import BadInput, NotAllowed, TooLarge
from inference.admission import admit_request
from inference.catalogue import available_models, get_model
from moderation.services import screen_input

TITLE_MAX = 200


@dataclass
class Turn:
    conversation: Conversation
    user_message: Message
    assistant_message: Message
    reservation: billing.Reservation


def clean_content(content: object) -> str:
    if not isinstance(content, str) or not content.strip():
        raise BadInput("Type a message first.")
    if len(content) > settings.CHAT_MAX_MESSAGE_CHARS:
        raise TooLarge(
            f"That message is {len(content):,} characters long; the limit is {settings.CHAT_MAX_MESSAGE_CHARS:,}. "
            "Shorten it or split it into parts."
        )
    return content


def default_model(user: User) -> str:
    allowed = billing.allowed_models(user)
    for model in available_models():
        if model.id in allowed:
            return model.id
    return available_models()[0].id


def check_model(user: User, model: str | None) -> str:
    model = model or default_model(user)
    if not isinstance(model, str) or get_model(model) is None:
        raise BadInput(f"There is no model called {model!r}.")
    billing.check_model_allowed(user, model)
    return model


def _check_account(user: User) -> None:
    if user.is_suspended:
        raise NotAllowed(f"Your account is suspended: {user.suspended_reason}")


def admit(user: User, *, model: str, text: str, prompt_tokens, max_tokens: int | None = None,
          ip: str | None = None, api_key_id: int | None = None) -> billing.Reservation:
    """Every check a new answer must pass, cheapest first; the web chat and the API both call this.

    `prompt_tokens` is the estimated prompt size, or a function of the plan giving it (the chat's
    context budget depends on the plan). Returns the quota reservation for prompt + answer.
    """
    _check_account(user)
    billing.check_rate_limit(user=user, api_key_id=api_key_id, ip=ip, scope="api" if api_key_id else "chat")
    verdict = screen_input(user, text)
    if not verdict.allowed:
        raise NotAllowed(verdict.reason or "This message is not allowed by the content policy.")
    plan = billing.effective_plan(user)
    admit_request(plan.priority_class)
    estimate = prompt_tokens(plan) if callable(prompt_tokens) else prompt_tokens
    return billing.reserve_quota(user, estimate + (max_tokens or plan.max_output_tokens), model=model,
                                 api_key_id=api_key_id)


def _admit(user: User, *, model: str, history: list[Message], new_text: str, system_prompt: str,
           ip: str | None) -> billing.Reservation:
    def estimate(plan) -> int:
        return estimate_prompt_tokens(history, new_text, plan=plan, model=model, system_prompt=system_prompt)

    return admit(user, model=model, text=new_text, prompt_tokens=estimate, ip=ip)


def _new_assistant(conversation: Conversation, parent: Message, model: str,
                   reservation: billing.Reservation) -> Message:
    return Message.objects.create(
        conversation=conversation, parent=parent, role=Message.Role.ASSISTANT, status=Message.Status.PENDING,
        model=model, request_id=uuid.uuid4().hex, reservation=reservation.as_dict(),
    )


@contextmanager
def _persist(reservation: billing.Reservation):
    """One transaction for what a turn saves; if it fails, the quota held for it is given back."""
    try:
        with transaction.atomic():
            yield
    except BaseException:
        billing.release(reservation)
        raise


def _new_question(conversation: Conversation, parent: Message | None, text: str) -> Message:
    return Message.objects.create(
        conversation=conversation, parent=parent, role=Message.Role.USER, content=text,
        status=Message.Status.COMPLETED, finished=timezone.now(),
    )


def start_turn(user: User, *, content: object, conversation_id: int | None = None, model: str | None = None,
               parent_id: int | None = None, ip: str | None = None) -> Turn:
    """Admit a new user message and persist it with the assistant's placeholder."""
    text = clean_content(content)
    conversation = selectors.get_conversation(user, conversation_id) if conversation_id is not None else None
    model = check_model(user, model or (conversation.model if conversation else None))

    parent = None
    if conversation is not None:
        if parent_id is not None:
            parent = selectors.get_message(user, parent_id)
            if parent.conversation_id != conversation.pk:
                raise BadInput("parent_id belongs to another conversation.")
        else:
            parent = selectors.branch_end(conversation)
        if parent is not None and parent.is_active:
            raise BadInput("Wait for the answer to finish, or stop it, before sending another message.")
    history = [*selectors.history_before(parent), parent] if parent is not None else []

    system_prompt = conversation.system_prompt if conversation else settings.CHAT_DEFAULT_SYSTEM_PROMPT
    reservation = _admit(user, model=model, history=history, new_text=text, system_prompt=system_prompt, ip=ip)
    with _persist(reservation):
        if conversation is None:
            conversation = Conversation.objects.create(
                owner=user, model=model, system_prompt=settings.CHAT_DEFAULT_SYSTEM_PROMPT
            )
        elif conversation.model != model:
            conversation.model = model
        conversation.save()  # bumps `updated`, so it rises to the top of the sidebar
        user_message = _new_question(conversation, parent, text)
        assistant = _new_assistant(conversation, user_message, model, reservation)
    return Turn(conversation, user_message, assistant, reservation)


def start_regeneration(user: User, message_id: int, *, ip: str | None = None) -> Turn:
    """A new answer to the same question, beside the old one."""
    old = selectors.get_message(user, message_id)
    if old.role != Message.Role.ASSISTANT or old.parent is None:
        raise BadInput("Only an answer can be regenerated.")
    if old.is_active:
        raise BadInput("This answer is still being written; stop it first.")
    question = old.parent
    conversation = old.conversation
    model = check_model(user, conversation.model)
    history = selectors.history_before(question)
    reservation = _admit(user, model=model, history=history, new_text=question.content,
                         system_prompt=conversation.system_prompt, ip=ip)
    with _persist(reservation):
        conversation.save()
        assistant = _new_assistant(conversation, question, model, reservation)
    return Turn(conversation, question, assistant, reservation)


def start_edit(user: User, message_id: int, content: object, *, ip: str | None = None) -> Turn:
    """Ask again with different words: a new branch from the edited message's parent."""
    original = selectors.get_message(user, message_id)
    if original.role != Message.Role.USER:
        raise BadInput("Only your own messages can be edited.")
    text = clean_content(content)
    conversation = original.conversation
    model = check_model(user, conversation.model)
    history = selectors.history_before(original)
    reservation = _admit(user, model=model, history=history, new_text=text,
                         system_prompt=conversation.system_prompt, ip=ip)
    with _persist(reservation):
        conversation.save()
        user_message = _new_question(conversation, original.parent, text)
        assistant = _new_assistant(conversation, user_message, model, reservation)
    return Turn(conversation, user_message, assistant, reservation)


def create_conversation(user: User, *, title: str = "", model: str | None = None,
                        system_prompt: str | None = None) -> Conversation:
    _check_account(user)
    return Conversation.objects.create(
        owner=user, title=_clean_title(title), model=check_model(user, model),
        system_prompt=settings.CHAT_DEFAULT_SYSTEM_PROMPT if system_prompt is None else str(system_prompt),
    )


def update_conversation(user: User, conversation_id: int, changes: dict) -> Conversation:
    conversation = selectors.get_conversation(user, conversation_id)
    unknown = set(changes) - {"title", "pinned", "archived", "model"}
    if unknown:
        raise BadInput(f"These fields cannot be changed: {', '.join(sorted(unknown))}.")
    if "title" in changes:
        conversation.title = _clean_title(changes["title"])
    for flag in ("pinned", "archived"):
        if flag in changes:
            if not isinstance(changes[flag], bool):
                raise BadInput(f"{flag} must be true or false.")
            setattr(conversation, flag, changes[flag])
    if "model" in changes:
        conversation.model = check_model(user, changes["model"])
    conversation.save()
    from chat.titles import announce_conversation

    transaction.on_commit(lambda: announce_conversation(conversation.pk))
    return conversation


def delete_conversation(user: User, conversation_id: int) -> None:
    selectors.get_conversation(user, conversation_id).delete()


def _clean_title(title: object) -> str:
    if not isinstance(title, str):
        raise BadInput("The title must be text.")
    return " ".join(title.split())[:TITLE_MAX]

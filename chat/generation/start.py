"""The start of a web chat answer: from a request to an answer ready to generate, in one trip.

`start_turn`, `start_regeneration`, `start_continuation` and `start_edit` are synchronous and run in one worker thread
each (one `sync_to_async` hop per request). Each loads what the turn needs (the conversation and
its messages, once), works out the turn's context, assembles the prompt (refusing one that can never
fit), admits it, and then persists the user's message and the assistant's placeholder in one
transaction. A refusal saves nothing (the page keeps what the user typed); after the commit, the
message is safe whatever happens to the generation.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import User
from accounts.standing import check_account
from billing import services as billing
from chat import selectors
from chat.generation import auto_route
from chat.generation.admit import Admitted, admit_prompt, holding
from chat.generation.assemble import Pictures, Prompt, assemble_for_turn, candidates
from chat.generation.engine import Job, route_job
from chat.generation.response_cache import Sampling
from chat.generation.turn import TurnContext, resolve_turn
from chat.models import Conversation, Message
from config import tracing
from config.refusals import BadInput, TooLarge
from config.text import grouped
from documents import retrieval
from documents.pictures import Attached, pictures
from documents.services import attach_to_conversation, use_in_conversation
from inference import capabilities


@dataclass
class Turn:
    """An admitted, saved answer waiting for the engine, with everything the runner needs."""

    context: TurnContext
    conversation: Conversation
    user_message: Message
    assistant_message: Message
    reservation: billing.Reservation
    job: Job
    #: The prompt leaves out older turns that the conversation's summary does not cover yet.
    needs_summary: bool
    #: The conversation has no title yet (one is written once this answer is in).
    untitled: bool
    #: The text of the answer this one continues (cut at its length limit): this one begins with it.
    continued: str = ""


@dataclass(frozen=True)
class Files:
    """Files sent with a message: uploaded in the composer before the chat existed (`document_ids`),
    and the collections a new chat is to use (`collection_ids`)."""

    document_ids: list[int] = field(default_factory=list)
    collection_ids: list[int] | None = None


NO_FILES = Files()


def clean_content(content: object) -> str:
    if not isinstance(content, str) or not content.strip():
        raise BadInput(_("Type a message first."))
    if len(content) > settings.CHAT_MAX_MESSAGE_CHARS:
        raise TooLarge(
            _("That message is %(length)s characters long; the limit is %(limit)s. Shorten it or split it into parts.")
            % {"length": grouped(len(content)), "limit": grouped(settings.CHAT_MAX_MESSAGE_CHARS)}
        )
    return content


def _question(
    conversation: Conversation, parent_id: int | None, text: str, question_pictures: Sequence[Attached] = ()
) -> Message:
    return Message.objects.create(
        conversation=conversation,
        parent_id=parent_id,
        role=Message.Role.USER,
        content=text,
        images=[p.document_id for p in question_pictures],
        status=Message.Status.COMPLETED,
        finished=timezone.now(),
    )


def _answer(conversation: Conversation, question: Message, admitted: Admitted, continued: str = "") -> Message:
    return Message.objects.create(
        conversation=conversation,
        parent=question,
        role=Message.Role.ASSISTANT,
        content=continued,
        continued_chars=len(continued),
        status=Message.Status.PENDING,
        model=admitted.turn.model.id,
        auto_route=admitted.turn.auto_route,
        request_id=admitted.rid,
        trace_id=tracing.trace_id(),
        reservation=admitted.reservation.as_dict(),
        sources=admitted.prompt.sources,
        prompt_frame=admitted.prompt.frame,
    )


def _retrieve(
    turn: TurnContext, conversation: Conversation | None, branch: list[Message], text: str, files: Files
) -> retrieval.Retrieved:
    """The passages of the chat's files (and of those sent with the message) that match the question,
    searched with the branch's previous question too (a follow-up names little by itself)."""
    documents = retrieval.readable_documents(
        turn.user.pk,
        conversation_id=conversation.pk if conversation else None,
        document_ids=files.document_ids,
        collection_ids=files.collection_ids or [],
    )
    if not documents:
        return retrieval.Retrieved(documents=[], passages=[])
    previous = next((m for m in reversed(branch) if m.role == Message.Role.USER), None)
    previous_text = selectors.with_content([previous])[0].content if previous is not None else ""
    return retrieval.retrieve(turn.user.pk, documents, text, previous_text)


def _question_pictures(user: User, picture_ids: Sequence[int]) -> list[Attached]:
    """The pictures among `picture_ids` (the files sent with a message, or an edited question's), in the
    order they were attached; more than a request to the engine may carry is refused (400)."""
    found = pictures(user.pk, picture_ids)
    sent = [found[i] for i in dict.fromkeys(picture_ids) if i in found]
    if len(sent) > settings.API_MAX_IMAGES:
        raise BadInput(
            _(
                "A message may carry at most %(limit)s pictures; this one has %(count)s. "
                "Send the others with a later message."
            )
            % {"limit": settings.API_MAX_IMAGES, "count": len(sent)},
            param="document_ids",
        )
    return sent


def _history_pictures(user: User, branch: list[Message], room: int) -> Pictures:
    """The pictures of the branch's turns that go with them: the newest `room` (a request to the engine
    carries at most API_MAX_IMAGES, the question's own first); older turns go as their text alone."""
    wanted: dict[int, list[int]] = {}
    for message in reversed(branch):
        if room <= 0:
            break
        if message.images:
            wanted[message.pk] = message.images[-room:]
            room -= len(wanted[message.pk])
    found = pictures(user.pk, [i for ids in wanted.values() for i in ids])
    return {pk: [found[i] for i in ids if i in found] for pk, ids in wanted.items()}


def _check_pictures(serving: TurnContext) -> None:
    """A question with pictures needs a plan that sends them (403, naming the plan that does) and a model
    that sees them (400)."""
    billing.check_images_allowed(serving.plan)
    if not capabilities.accepts_images(serving.model.id):
        raise BadInput(
            _(
                "%(model)s does not see pictures (its engines serve a text-only model). Choose a model "
                "that does, or send the message without them."
            )
            % {"model": serving.model.name},
            param="document_ids",
        )


def _admit(
    turn: TurnContext,
    conversation: Conversation | None,
    branch: list[Message],
    text: str,
    files: Files = NO_FILES,
    question_pictures: Sequence[Attached] = (),
    *,
    sending_pictures: bool = True,
    regenerate: bool = False,
    answer_so_far: str = "",
) -> Admitted:
    """`branch` is the turns before the question, from the conversation's MessageTree (text not loaded).
    The turn comes back with the model that will write the answer (a plan's fallback when the asked
    model's engines are busy). Pictures being sent (`sending_pictures`) need the plan and the model to
    take them; those an edited or regenerated question already had, and earlier turns', go with their
    turn when the plan and the model allow, and otherwise its text alone does."""

    # Read when the first prompt is built: a request refused before that (admit_prompt) costs neither.
    @functools.cache
    def retrieved() -> retrieval.Retrieved:
        return _retrieve(turn, conversation, branch, text, files)

    @functools.cache
    def earlier() -> Pictures:
        return _history_pictures(turn.user, branch, settings.API_MAX_IMAGES - len(question_pictures))

    def prompt_for(serving: TurnContext) -> Prompt:
        if question_pictures and sending_pictures:
            _check_pictures(serving)
        sees = serving.plan.allows_images and capabilities.accepts_images(serving.model.id)
        return assemble_for_turn(
            serving,
            system_prompt=conversation.system_prompt if conversation else "",
            summary=conversation.summary if conversation else "",
            history=selectors.with_content(candidates(branch, serving.prompt_budget)),
            question=text,
            retrieved=retrieved(),
            question_pictures=question_pictures if sees else (),
            pictures=earlier() if sees else {},
            answer_so_far=answer_so_far,
        )

    sampling = Sampling(temperature=settings.CHAT_TEMPERATURE, regenerate=regenerate, continuation=bool(answer_so_far))
    # A continuation is written on by the model that wrote the cut answer, never by a plan's fallback.
    return admit_prompt(
        turn,
        question=text,
        prompt_for=prompt_for,
        sampling=sampling,
        first_question=not branch,
        fallback=not answer_so_far,
    )


def _routed_job(admitted: Admitted, conversation: Conversation) -> Job:
    """The engine request, routed by conversation (inside the turn's transaction: if no node can take
    it, nothing is saved and the refusal reaches the user)."""
    return route_job(admitted.job(routing_key=str(conversation.pk)))


def _turn(
    admitted: Admitted,
    conversation: Conversation,
    question: Message,
    answer: Message,
    job: Job,
    *,
    untitled: bool,
    continued: str = "",
) -> Turn:
    dropped = admitted.prompt.dropped
    dropped_through = dropped[-1].pk if dropped else None
    return Turn(
        context=admitted.turn,
        conversation=conversation,
        user_message=question,
        assistant_message=answer,
        reservation=admitted.reservation,
        job=job,
        needs_summary=dropped_through is not None and conversation.summary_through_id != dropped_through,
        untitled=untitled,
        continued=continued,
    )


def start_turn(
    user: User,
    *,
    content: object,
    conversation_id: int | None = None,
    model: str | None = None,
    parent_id: int | None = None,
    files: Files = NO_FILES,
    ip: str | None = None,
) -> Turn:
    """Admit a new user message and persist it with the assistant's placeholder; the files sent with
    it become the conversation's, and the collections named the ones it uses."""
    text = clean_content(content)
    check_account(user)
    conversation = tree = None
    if conversation_id is not None:
        conversation = selectors.get_conversation(user, conversation_id)
        tree = selectors.message_tree(conversation)
    turn = resolve_turn(user, model or (conversation.model if conversation else None), ip=ip)

    parent = None
    if tree is not None:
        if parent_id is not None:
            parent = tree.get(parent_id)
            if parent is None:
                raise BadInput("parent_id is not a message of this conversation.")
        else:
            parent = tree.newest
        if parent is not None and parent.is_active:
            raise BadInput(_("Wait for the answer to finish, or stop it, before sending another message."))
    history = tree.path_to(parent) if tree is not None and parent is not None else []

    asked = turn.model.id  # the conversation keeps the model asked for, even if a fallback answers
    question_pictures = _question_pictures(user, files.document_ids)
    admitted = _admit(turn, conversation, history, text, files, question_pictures)
    with holding(admitted), transaction.atomic():
        if conversation is None:
            # A new chat: counted last, so a request refused by anything else never uses up the day's
            # number; refused here, the reservation and the admission place are given back.
            billing.count_new_chat(user, turn.plan)
            conversation = Conversation.objects.create(owner=user, model=asked)
        else:
            conversation.model = asked
            conversation.save(update_fields=["model", "updated"])  # rises to the top of the sidebar
        if files.document_ids:
            attach_to_conversation(user, files.document_ids, conversation)
        if files.collection_ids is not None:
            use_in_conversation(user, conversation, files.collection_ids)
        question = _question(conversation, parent.pk if parent is not None else None, text, question_pictures)
        answer = _answer(conversation, question, admitted)
        job = _routed_job(admitted, conversation)
    question.sibling_ids = [*(tree.sibling_ids(question.parent_id) if tree is not None else []), question.pk]
    answer.sibling_ids = [answer.pk]
    return _turn(admitted, conversation, question, answer, job, untitled=not conversation.title)


def start_regeneration(user: User, message_id: int, *, ip: str | None = None, model: object = None) -> Turn:
    """A new answer to the same question, beside the old one: by the conversation's model, or by `model`
    (under an answer Auto gave the small model, "Retry with the larger model" asks for the large one:
    recorded as an escalation, chat.generation.auto_route)."""
    old = selectors.get_message(user, message_id)
    if old.role != Message.Role.ASSISTANT or old.parent_id is None:
        raise BadInput(_("Only an answer can be regenerated."))
    if old.is_active:
        raise BadInput(_("This answer is still being written; stop it first."))
    conversation = old.conversation
    tree = selectors.message_tree(conversation)
    question = selectors.with_content([tree.get(old.parent_id)])[0]
    turn = resolve_turn(user, model or conversation.model, ip=ip)
    larger = auto_route.larger_model_id()
    if model and old.auto_route not in ("", auto_route.ESCALATED) and old.model != larger == turn.model.id:
        turn = dataclasses.replace(turn, auto_route=auto_route.ESCALATED)
    return _answer_again(turn, conversation, tree, question, regenerate=True)


def _answer_again(
    turn: TurnContext,
    conversation: Conversation,
    tree: selectors.MessageTree,
    question: Message,
    *,
    regenerate: bool = False,
    continued: str = "",
) -> Turn:
    """A new answer to `question` beside its others (a regeneration, or the continuation of the answer
    whose text is `continued`): admitted with the turns before it, the pictures it had, then saved."""
    admitted = _admit(
        turn,
        conversation,
        tree.path_to(question)[:-1],
        question.content,
        NO_FILES,
        _question_pictures(turn.user, question.images),
        sending_pictures=False,
        regenerate=regenerate,
        answer_so_far=continued,
    )
    with holding(admitted), transaction.atomic():
        conversation.save(update_fields=["updated"])
        answer = _answer(conversation, question, admitted, continued)
        job = _routed_job(admitted, conversation)
    question.sibling_ids = tree.sibling_ids(question.parent_id)
    answer.sibling_ids = [*tree.sibling_ids(question.pk), answer.pk]
    return _turn(admitted, conversation, question, answer, job, untitled=not conversation.title, continued=continued)


def start_continuation(user: User, message_id: int, *, ip: str | None = None) -> Turn:
    """Write on from an answer cut at its length limit: a new version of it, beside the cut one, that
    begins with its text and goes on where it stopped (the engine continues the answer in the prompt,
    SGLang's continue_final_message), by the model that wrote it."""
    cut = selectors.get_message(user, message_id)
    if cut.role != Message.Role.ASSISTANT or cut.parent_id is None:
        raise BadInput(_("Only an answer can be continued."))
    if cut.is_active:
        raise BadInput(_("This answer is still being written; stop it first."))
    if not cut.can_continue:
        raise BadInput(_("Only an answer that reached its length limit can be continued; regenerate this one instead."))
    conversation = cut.conversation
    tree = selectors.message_tree(conversation)
    question = selectors.with_content([tree.get(cut.parent_id)])[0]
    turn = resolve_turn(user, cut.model or conversation.model, ip=ip)
    return _answer_again(turn, conversation, tree, question, continued=cut.content)


def start_edit(user: User, message_id: int, content: object, *, ip: str | None = None) -> Turn:
    """Ask again with different words: a new branch from the edited message's parent."""
    original = selectors.get_message(user, message_id)
    if original.role != Message.Role.USER:
        raise BadInput(_("Only your own messages can be edited."))
    text = clean_content(content)
    conversation = original.conversation
    tree = selectors.message_tree(conversation)
    turn = resolve_turn(user, conversation.model, ip=ip)
    # The new words ask about the same pictures.
    question_pictures = _question_pictures(user, original.images)
    admitted = _admit(
        turn, conversation, tree.path_to(original)[:-1], text, NO_FILES, question_pictures, sending_pictures=False
    )
    with holding(admitted), transaction.atomic():
        conversation.save(update_fields=["updated"])
        question = _question(conversation, original.parent_id, text, question_pictures)
        answer = _answer(conversation, question, admitted)
        job = _routed_job(admitted, conversation)
    question.sibling_ids = [*tree.sibling_ids(original.parent_id), question.pk]
    answer.sibling_ids = [answer.pk]
    return _turn(admitted, conversation, question, answer, job, untitled=not conversation.title)

"""Answer feedback as JSONL for offline evaluation: one object per rating, with what the model was
asked (the system prompts, the summary and the turns its prompt carried, as recorded with the answer:
`context_recorded`; for an answer saved before that was recorded, the chat's system prompt today and
the turns of the branch that led to it), the files it quoted (`sources`: passages' text is not
kept), the answer, the model and node that served it, the rating and the comment.

`feedback_record` builds one record; the admin action and `manage.py export_feedback` both write
`jsonl_lines`, so the two exports are the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from chat.generation.assemble import SUMMARY_HEADER
from chat.models import AnswerFeedback, Message
from chat.selectors import MessageTree
from chat.serializers import _iso

#: Ratings whose conversations are loaded together (one query for all their messages).
BATCH = 200


def _turn(message: Message) -> dict:
    return {"role": message.role, "content": message.content}


def _context(answer: Message, tree: MessageTree) -> tuple[list[dict], bool]:
    """What the model was sent before the answer, and whether it was recorded with the answer (else it
    is rebuilt from the chat as it is now: its system prompt today, every turn of the branch)."""
    leading = tree.path_to(tree.get(answer.pk) or answer)[:-1]
    frame = answer.prompt_frame
    if not frame:
        system = answer.conversation.system_prompt
        return [*([{"role": "system", "content": system}] if system else []), *map(_turn, leading)], False
    context = [{"role": "system", "content": prompt} for prompt in frame.get("system", [])]
    if frame.get("summary"):
        context.append({"role": "system", "content": SUMMARY_HEADER + frame["summary"]})
    carried = set(frame.get("turns", []))
    context += [_turn(m) for m in leading[:-1] if m.pk in carried]
    if leading:
        context.append(_turn(leading[-1]))  # the question
    return context, True


def feedback_record(feedback: AnswerFeedback, tree: MessageTree) -> dict:
    """One rating as an evaluation record. `tree` holds the whole messages of the answer's conversation."""
    answer = feedback.message
    conversation = answer.conversation
    context, recorded = _context(answer, tree)
    return {
        "id": feedback.pk,
        "conversation_id": conversation.pk,
        "message_id": answer.pk,
        "context": context,
        "context_recorded": recorded,
        "sources": [{"n": s.get("n"), "name": s.get("name"), "page": s.get("page")} for s in answer.sources],
        "answer": answer.content,
        "status": answer.status,
        "model": answer.model,
        "node": answer.node,
        "rating": feedback.rating,
        "comment": feedback.comment,
        "created": _iso(feedback.created),
        "updated": _iso(feedback.updated),
    }


def records(feedback: Iterable[AnswerFeedback]) -> Iterator[dict]:
    """The records of `feedback` (rows with their message and conversation selected), in its order;
    the messages of their conversations are loaded a batch of ratings at a time."""
    batch: list[AnswerFeedback] = []
    for row in feedback:
        batch.append(row)
        if len(batch) == BATCH:
            yield from _batch_records(batch)
            batch = []
    if batch:
        yield from _batch_records(batch)


def _batch_records(batch: list[AnswerFeedback]) -> Iterator[dict]:
    conversation_ids = {f.message.conversation_id for f in batch}
    messages: dict[int, list[Message]] = {pk: [] for pk in conversation_ids}
    for message in Message.objects.filter(conversation_id__in=conversation_ids):
        messages[message.conversation_id].append(message)
    trees = {pk: MessageTree(found) for pk, found in messages.items()}
    for feedback in batch:
        yield feedback_record(feedback, trees[feedback.message.conversation_id])


def jsonl_lines(feedback: Iterable[AnswerFeedback]) -> Iterator[str]:
    for record in records(feedback):
        yield json.dumps(record, ensure_ascii=False) + "\n"

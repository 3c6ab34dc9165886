"""Answer feedback as JSONL for offline evaluation: one object per rating, with what the model was
asked (the system prompt and the turns of the branch that led to the answer), the answer, the
model and node that served it, the rating and the comment.

`feedback_record` builds one record; the admin action and `manage.py export_feedback` both write
`jsonl_lines`, so the two exports are the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from chat.models import AnswerFeedback, Message
from chat.selectors import MessageTree
from chat.serializers import _iso

#: Ratings whose conversations are loaded together (one query for all their messages).
BATCH = 200


def feedback_record(feedback: AnswerFeedback, tree: MessageTree) -> dict:
    """One rating as an evaluation record. `tree` holds the whole messages of the answer's conversation."""
    answer = feedback.message
    conversation = answer.conversation
    context = [{"role": "system", "content": conversation.system_prompt}] if conversation.system_prompt else []
    leading = tree.path_to(tree.get(answer.pk) or answer)[:-1]
    context += [{"role": m.role, "content": m.content} for m in leading]
    return {
        "id": feedback.pk,
        "conversation_id": conversation.pk,
        "message_id": answer.pk,
        "context": context,
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

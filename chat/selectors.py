"""Reads for the chat app. Ownership is checked here: another user's objects are "not found"."""

from django.db.models import Exists, OuterRef, Q, QuerySet

from accounts.models import User
from chat.models import Conversation, Message
from config.refusals import NotFound


def conversations_for(user: User, *, query: str = "", archived: bool = False) -> QuerySet[Conversation]:
    """The user's conversations, pinned first, then most recently active; `query` searches titles
    and message text."""
    generating = Message.objects.filter(conversation=OuterRef("pk"), status__in=Message.ACTIVE_STATUSES)
    conversations = Conversation.objects.filter(owner=user, archived=archived).annotate(generating=Exists(generating))
    query = query.strip()
    if query:
        in_messages = Message.objects.filter(conversation=OuterRef("pk"), content__icontains=query)
        conversations = conversations.filter(Q(title__icontains=query) | Exists(in_messages))
    return conversations.order_by("-pinned", "-updated")


def get_conversation(user: User, conversation_id: int) -> Conversation:
    conversation = Conversation.objects.filter(pk=conversation_id, owner=user).first()
    if conversation is None:
        raise NotFound("There is no such conversation.")
    return conversation


def get_message(user: User, message_id: int) -> Message:
    message = Message.objects.select_related("conversation").filter(pk=message_id, conversation__owner=user).first()
    if message is None:
        raise NotFound("There is no such message.")
    return message


def active_generations(user: User) -> list[dict]:
    return [
        {"conversation_id": cid, "message_id": mid}
        for mid, cid in Message.objects.filter(
            conversation__owner=user, status__in=Message.ACTIVE_STATUSES
        ).values_list("id", "conversation_id")
    ]


def branch(conversation: Conversation, leaf_id: int | None = None) -> list[Message]:
    """The messages on one branch, oldest first.

    A conversation is a tree (edit and regenerate add siblings). The branch shown runs from the
    root to `leaf_id` and on down through the newest children; without a leaf it ends at the
    newest message of the conversation, which is where the user last spoke or regenerated.
    """
    messages = {m.pk: m for m in conversation.messages.all()}
    if not messages:
        return []
    if leaf_id is not None and leaf_id not in messages:
        raise NotFound("There is no such message in this conversation.")
    leaf = messages[leaf_id] if leaf_id is not None else max(messages.values(), key=lambda m: (m.created, m.pk))

    children: dict[int | None, list[Message]] = {}
    for message in sorted(messages.values(), key=lambda m: (m.created, m.pk)):
        children.setdefault(message.parent_id, []).append(message)

    path = []
    node: Message | None = leaf
    while node is not None:
        path.append(node)
        node = messages.get(node.parent_id) if node.parent_id else None
    path.reverse()
    tail = children.get(leaf.pk)
    while tail:
        path.append(tail[-1])
        tail = children.get(tail[-1].pk)

    for message in path:
        message.sibling_ids = [m.pk for m in children.get(message.parent_id, [])]
    return path


def branch_end(conversation: Conversation) -> Message | None:
    """Where a new message goes by default: the end of the branch shown."""
    path = branch(conversation)
    return path[-1] if path else None


def history_before(message: Message) -> list[Message]:
    """The turns that lead to `message` (excluded), oldest first."""
    messages = {m.pk: m for m in message.conversation.messages.all()}
    path = []
    node = messages.get(message.parent_id) if message.parent_id else None
    while node is not None:
        path.append(node)
        node = messages.get(node.parent_id) if node.parent_id else None
    path.reverse()
    return path

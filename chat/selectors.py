"""Reads for the chat app. Ownership is checked here: another user's objects are "not found"."""

from datetime import timedelta

from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Length
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import pgettext

from accounts.models import User
from billing import services as billing
from chat.feedback.selectors import attach_feedback
from chat.models import AnswerFeedback, Conversation, Message
from config.refusals import BadInput, NotFound
from inference.catalogue import AUTO, auto_models, available_models


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
        raise NotFound(_("There is no such conversation."))
    return conversation


def get_message(user: User, message_id: int) -> Message:
    message = Message.objects.select_related("conversation").filter(pk=message_id, conversation__owner=user).first()
    if message is None:
        raise NotFound(_("There is no such message."))
    return message


def answer_to_follow(user: User, message_id: int) -> Message:
    """The user's answer whose token stream they may follow (SSE and WebSocket alike): "not found" for
    anyone else's message, a refusal for a question (only answers have a stream)."""
    message = get_message(user, message_id)
    if message.role != Message.Role.ASSISTANT:
        raise BadInput("Only answers have a token stream.")
    return message


def active_generations(user: User) -> list[dict]:
    return [
        {"conversation_id": cid, "message_id": mid}
        for mid, cid in Message.objects.filter(
            conversation__owner=user, status__in=Message.ACTIVE_STATUSES
        ).values_list("id", "conversation_id")
    ]


#: What a message tree loads of every message: its place in the tree, not its text.
SKELETON = ("id", "conversation_id", "parent_id", "created", "role", "status", "model", "images")


class MessageTree:
    """The shape of a conversation, loaded once and without the text of its messages (one small row
    per message, however long the conversation): edit and regenerate make it a tree of branches.
    Callers load the text of just the messages they need with `with_content`. Every message here has
    `chars`, the length of its text."""

    def __init__(self, messages: list[Message]):
        ordered = sorted(messages, key=lambda m: (m.created, m.pk))
        self.by_id = {m.pk: m for m in ordered}
        self.children: dict[int | None, list[Message]] = {}
        for message in ordered:
            self.children.setdefault(message.parent_id, []).append(message)
        self.newest = ordered[-1] if ordered else None

    def get(self, message_id: int) -> Message | None:
        return self.by_id.get(message_id)

    def path_to(self, message: Message) -> list[Message]:
        """`message` and the turns that lead to it, oldest first."""
        path = []
        node: Message | None = message
        while node is not None:
            path.append(node)
            node = self.by_id.get(node.parent_id) if node.parent_id else None
        path.reverse()
        return path

    def sibling_ids(self, parent_id: int | None) -> list[int]:
        return [m.pk for m in self.children.get(parent_id, [])]

    def branch(self, leaf_id: int | None = None) -> list[Message]:
        """The messages on one branch, oldest first, each with its `sibling_ids`.

        The branch shown runs from the root to `leaf_id` and on down through the newest children;
        without a leaf it ends at the newest message of the conversation, which is where the user
        last spoke or regenerated.
        """
        if self.newest is None:
            return []
        if leaf_id is not None and leaf_id not in self.by_id:
            raise NotFound(_("There is no such message in this conversation."))
        leaf = self.by_id[leaf_id] if leaf_id is not None else self.newest
        path = self.path_to(leaf)
        tail = self.children.get(leaf.pk)
        while tail:
            path.append(tail[-1])
            tail = self.children.get(tail[-1].pk)
        for message in path:
            message.sibling_ids = self.sibling_ids(message.parent_id)
        return path


def message_tree(conversation: Conversation) -> MessageTree:
    return MessageTree(list(conversation.messages.only(*SKELETON).annotate(chars=Length("content"))))


def with_content(messages: list[Message]) -> list[Message]:
    """The rows of `messages` (taken from a MessageTree), in the same order, in one query."""
    if not messages:
        return []
    # Not the answers' prompt frames: only the feedback export reads them, and they grow with the chat.
    rows = Message.objects.defer("prompt_frame").in_bulk([m.pk for m in messages])
    whole = []
    for message in messages:
        row = rows[message.pk]
        if hasattr(message, "sibling_ids"):
            row.sibling_ids = message.sibling_ids
        whole.append(row)
    return whole


def branch(conversation: Conversation, leaf_id: int | None = None) -> list[Message]:
    """The whole messages on one branch of `conversation`, oldest first (see MessageTree.branch), in
    one query: for callers that need every message's text (exports, summaries, shared pages)."""
    return MessageTree(list(conversation.messages.all())).branch(leaf_id)


#: Messages of a branch the chat page gets at once; earlier ones come on request.
PAGE_MESSAGES = 100


def branch_page(
    conversation: Conversation, leaf_id: int | None = None, *, before_id: int | None = None, limit: int = PAGE_MESSAGES
) -> tuple[list[Message], bool]:
    """The newest `limit` messages of a branch (or those just before `before_id` on it), and whether
    earlier ones exist, each answer with the owner's rating. The same three queries however long the
    conversation is."""
    path = message_tree(conversation).branch(leaf_id)
    end = len(path)
    if before_id is not None:
        end = next((index for index, message in enumerate(path) if message.pk == before_id), -1)
        if end < 0:
            raise NotFound(_("There is no such message on this branch."))
    start = max(end - limit, 0)
    page = with_content(path[start:end])
    attach_feedback(conversation.owner_id, page)
    return page, start > 0


def conversations_with_trees(user: User, *, batch: int = 100):
    """Every conversation of the user (archived too), oldest first, each with all its messages (whole rows) as a
    MessageTree; messages are loaded a batch of conversations at a time (one query per batch)."""
    ids = list(Conversation.objects.filter(owner=user).order_by("created", "pk").values_list("pk", flat=True))
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        messages: dict[int, list[Message]] = {pk: [] for pk in chunk}
        for message in Message.objects.filter(conversation_id__in=chunk):
            messages[message.conversation_id].append(message)
        for conversation in Conversation.objects.filter(pk__in=chunk).order_by("created", "pk"):
            yield conversation, MessageTree(messages[conversation.pk])


def every_message(conversation: Conversation) -> list[Message]:
    """Every message of `conversation`, all branches, oldest first (for staff reading it with a reason)."""
    return list(conversation.messages.order_by("created", "pk"))


def semantic_cache_report(days: int = 7) -> dict:
    """What the semantic cache did for the web chat over the last `days` days: first answers written,
    those answered from a similar question's answer, and the thumbs-down people gave those (wrong hits
    they reported). Programs' hits are in the x-cache header and the sglchat_semantic_cache metric."""
    since = timezone.now() - timedelta(days=days)
    first = Message.objects.filter(
        role=Message.Role.ASSISTANT, parent__parent__isnull=True, created__gte=since
    ).exclude(status__in=Message.ACTIVE_STATUSES)
    counts = first.aggregate(
        answers=Count("pk"),
        similar=Count("pk", filter=Q(cache_hit=Message.CacheHit.SIMILAR)),
    )
    reported = AnswerFeedback.objects.filter(
        message__cache_hit=Message.CacheHit.SIMILAR, rating=AnswerFeedback.Rating.DOWN, message__created__gte=since
    ).count()
    rate = counts["similar"] / counts["answers"] if counts["answers"] else None
    return {"days": days, **counts, "hit_rate": rate, "wrong_hit_reports": reported}


def auto_model_report(days: int = 7) -> dict:
    """What Auto did in the web chat over the last `days` days, per model: the answers it routed there,
    the share, how many of those were regenerated (any model) and how many were retried on the larger
    model ("escalated"), and the thumbs up and down they got. API turns are counted by the
    sglchat_auto_routes metric only (they leave no message)."""
    since = timezone.now() - timedelta(days=days)
    answers = Message.objects.filter(role=Message.Role.ASSISTANT, created__gte=since).exclude(auto_route="")
    chosen = answers.exclude(auto_route="escalated")
    later = Message.objects.filter(
        parent=OuterRef("parent"), role=Message.Role.ASSISTANT, created__gt=OuterRef("created")
    )
    rows = list(
        chosen.values("model")
        .annotate(
            answers=Count("pk", distinct=True),
            regenerated=Count("pk", filter=Exists(later), distinct=True),
            up=Count("feedback", filter=Q(feedback__rating=AnswerFeedback.Rating.UP)),
            down=Count("feedback", filter=Q(feedback__rating=AnswerFeedback.Rating.DOWN)),
        )
        .order_by("model")
    )
    total = sum(row["answers"] for row in rows)
    for row in rows:
        row["share"] = row["answers"] / total if total else 0.0
    routes = dict(chosen.values_list("auto_route").annotate(n=Count("pk")).values_list("auto_route", "n"))
    return {
        "days": days,
        "answers": total,
        "models": rows,
        "routes": routes,
        "escalated": answers.filter(auto_route="escalated").count(),
    }


def model_menu(plan) -> list[dict]:
    """The page's model picker: every chat model offered (Auto first, when it is), whether the plan
    allows it, and for Auto the larger model its "Retry with the larger model" asks for."""
    allowed = set(billing.plan_model_ids(plan))
    pair = auto_models()
    menu = []
    for model in available_models():
        # Auto is the product's own choice between two models: its name is a word, in the page's language.
        name = pgettext("model picker", "Auto") if model.id == AUTO else model.name
        item = {"id": model.id, "name": name, "allowed": model.id in allowed}
        if model.id == AUTO and pair is not None:
            item["larger"] = {"id": pair[1].id, "name": pair[1].name, "allowed": pair[1].id in allowed}
        menu.append(item)
    return menu

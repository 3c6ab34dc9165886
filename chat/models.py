from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q


class Conversation(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    title = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=100)
    # The conversation's own system prompt, after the product's pinned prompt and the owner's custom
    # instructions (chat.generation.assemble), so the shared prefix before it stays cached.
    system_prompt = models.TextField(blank=True)
    # A running summary of turns too old to fit the context budget (made by a Celery task).
    summary = models.TextField(blank=True)
    summary_through = models.ForeignKey(
        "Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The newest message the summary covers.",
    )
    pinned = models.BooleanField(default=False)
    archived = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["owner", "archived", "-pinned", "-updated"], name="conv_owner_recent")]

    def __str__(self) -> str:
        # Its number, never its title: the title is written from what the user said, and this is what the
        # staff console (admin pages, the audit log) prints for a conversation. Users see `title`.
        return f"Conversation #{self.pk}"


class Message(models.Model):
    class CacheHit(models.TextChoices):
        EXACT = "exact", "The same question"
        SIMILAR = "similar", "A similar question"

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    class Status(models.TextChoices):
        PENDING = "pending"
        STREAMING = "streaming"
        COMPLETED = "completed"
        STOPPED = "stopped"
        FAILED = "failed"
        INTERRUPTED = "interrupted"
        BLOCKED = "blocked"

    ACTIVE_STATUSES = (Status.PENDING, Status.STREAMING)

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    # Edit and regenerate make siblings: messages with the same parent are branches.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.COMPLETED)
    error = models.CharField(max_length=500, blank=True, help_text="Shown to the user when the answer failed.")
    model = models.CharField(max_length=100, blank=True)
    node = models.CharField(max_length=200, blank=True, help_text="The engine that served the answer.")
    request_id = models.CharField(max_length=64, blank=True, help_text="The engine request id (SGLang rid).")
    trace_id = models.CharField(
        max_length=32, blank=True, help_text="The trace of the request that started it (empty when tracing is off)."
    )
    prompt_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(null=True, blank=True, help_text="Time to first token.")
    # The quota reservation made for this answer, so whichever process ends it can settle it.
    reservation = models.JSONField(default=dict, blank=True)
    # The passages of the owner's files the answer's prompt quoted, numbered as the model cites them
    # ([1], [2]): n, chunk_id, document_id, name, page, heading (chat.generation.assemble).
    sources = models.JSONField(default=list, blank=True)
    # A question's pictures, sent to a vision model with its text: ids of the owner's documents of kind
    # image (documents.models), in the order attached. A picture deleted since is left out of prompts.
    images = models.JSONField(default=list, blank=True)
    #: An answer's prompt as sent, besides its question and the passages (`sources`): "system", its system
    #: prompts (the product's, the custom instructions, the chat's, as they were then); "summary", the
    #: summary standing in for the turns left out, if any; "turns", the ids of the earlier turns it carried.
    #: The feedback export gives evaluations what the model saw from it (chat.feedback.export).
    prompt_frame = models.JSONField(default=dict, blank=True)
    #: Answered from the response cache instead of the engine: for the same question ("exact"), or for a
    #: similar earlier one ("similar", chat.generation.semantic_cache: the page offers to answer afresh).
    cache_hit = models.CharField(max_length=8, blank=True, choices=CacheHit.choices)
    #: Why Auto chose this answer's model ("easy", "hard", "images", "tools", "context", "plan", or
    #: "escalated": retried on the larger model); empty when the person chose it (chat.generation.auto_route).
    auto_route = models.CharField(max_length=12, blank=True)
    #: Why the engine ended the answer: "stop" (it was done), "length" (it reached the answer's token
    #: limit: the page offers to continue it), "abort" (stopped); empty when it gave none.
    finish_reason = models.CharField(max_length=16, blank=True)
    #: An answer that continues an earlier one cut at its length limit begins with that one's text: these
    #: are its first characters, written (and billed) by the earlier answer, not by this one.
    continued_chars = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created", "id"]
        indexes = [
            models.Index(fields=["conversation", "created"], name="msg_conversation_created"),
            models.Index(fields=["status"], condition=Q(status__in=["pending", "streaming"]), name="msg_active"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["request_id"], condition=~Q(request_id=""), name="msg_unique_request_id"),
        ]

    def __str__(self) -> str:
        return f"{self.role} {self.pk} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE_STATUSES

    @property
    def can_continue(self) -> bool:
        """A whole answer cut at its length limit: it can be written on from where it stops."""
        return (
            self.role == self.Role.ASSISTANT
            and self.status == self.Status.COMPLETED
            and self.finish_reason == "length"
            and bool(self.content)
        )


class SharedConversation(models.Model):
    """A read-only link to a conversation, for anyone who has it (chat.sharing decides the rules).

    The token is the link's only secret: random, long enough that it cannot be guessed, and kept as
    is (behind a unique index) so its owner can copy the link again later.
    """

    class Mode(models.TextChoices):
        SNAPSHOT = "snapshot", "Snapshot"  # the branch on screen when shared
        LIVE = "live", "Live"  # the current branch, whenever the link is opened

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="shares")
    token = models.CharField(max_length=64, unique=True)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.SNAPSHOT)
    # Snapshot: the ids of the messages on the branch that was on screen, root first.
    message_ids = models.JSONField(default=list, blank=True)
    show_owner_name = models.BooleanField(
        default=False, help_text="Show the owner's display name on the shared page (never their email)."
    )
    show_passages = models.BooleanField(
        default=False,
        help_text="Show, under each cited source, the passage of the owner's file that the answer quoted.",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    taken_down_at = models.DateTimeField(null=True, blank=True)
    taken_down_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    takedown_reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = "shared link"
        constraints = [
            # At most one working link per conversation: sharing again updates it.
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(revoked_at__isnull=True, taken_down_at__isnull=True),
                name="share_one_active_per_conversation",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.token[:6]}… (conversation #{self.conversation_id})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and self.taken_down_at is None


class AnswerFeedback(models.Model):
    """A user's thumbs up or down on one of their answers, with an optional comment, for offline
    evaluation (chat.feedback decides the rules). It stores the rating only: the export joins the
    answer, its model and node and the turns before it from the conversation."""

    class Rating(models.TextChoices):
        UP = "up", "Thumbs up"
        DOWN = "down", "Thumbs down"

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="answer_feedback")
    rating = models.CharField(max_length=8, choices=Rating.choices)
    comment = models.TextField(blank=True, max_length=2000)
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name = "answer feedback"
        verbose_name_plural = "answer feedback"
        constraints = [
            models.UniqueConstraint(fields=["message", "user"], name="feedback_one_per_user_and_answer"),
        ]

    def __str__(self) -> str:
        return f"{self.get_rating_display()} on answer {self.message_id}"


class SemanticCachePolicy(models.Model):
    """Staff's settings of the semantic response cache (chat.generation.semantic_cache): one row, edited
    in the console. Off until staff turn it on."""

    class Scope(models.TextChoices):
        PERSON = "person", "Each person's own earlier questions"
        PUBLIC = (
            "public",
            "Anyone's earlier questions, when the product's prompt is the only instruction (a public FAQ)",
        )

    enabled = models.BooleanField(
        default=False,
        help_text="Answer a first question from the answer to a very similar earlier one, marked as such, "
        "with a button to answer afresh. Needs an embedding model (RETRIEVAL_EMBEDDING_MODEL).",
    )
    threshold = models.FloatField(
        default=0.95,
        validators=[MinValueValidator(0.8), MaxValueValidator(1.0)],
        help_text="How alike two questions must be (cosine similarity of their embeddings, 0.8 to 1). "
        "Higher serves fewer answers from the cache and fewer wrong ones.",
    )
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.PERSON)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "semantic cache"
        verbose_name_plural = "semantic cache"

    def __str__(self) -> str:
        return "Semantic cache"


class AutoModelPolicy(models.Model):
    """Staff's setting of the Auto model (chat.generation.auto_route): one row, edited in the console."""

    DEFAULT_LARGE_SHARE = 30

    large_share_percent = models.PositiveSmallIntegerField(
        "target share for the large model (%)",
        default=DEFAULT_LARGE_SHARE,
        validators=[MaxValueValidator(100)],
        help_text="Of the turns Auto decides by difficulty, the share to send to the large model: the hardest-"
        "looking ones. Pictures, tools and long prompts go where they must whatever this says.",
    )
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "Auto model"
        verbose_name_plural = "Auto model"

    def __str__(self) -> str:
        return "Auto model"

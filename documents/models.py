"""A person's files: documents attached to a conversation or kept in a collection, and the passages
(chunks) retrieval finds in them.

A document belongs to its owner, always; it is attached to one conversation, or kept in one of the
owner's collections (which any of their chats can use), or neither yet (uploaded in the composer
before the chat's first message). Its file lives in the default storage (django-storages in
production). Chunks keep the text, its page and heading, and the owner again, so that retrieval
filters on the owner in the same query that searches and can never return another person's text.
The search index over chunks (vectors and full text) is the search backend's (documents.search).
A picture sent with a message is a document too (kind `image`): kept, counted and deleted like any
file, but never read or indexed; the message that carried it lists it (chat.Message.images).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class Collection(models.Model):
    """A knowledge base: files kept together and attached to any of the owner's chats."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="collections")
    name = models.CharField(max_length=200)
    #: The owner's chats whose answers read this collection's files.
    conversations = models.ManyToManyField("chat.Conversation", blank=True, related_name="collections")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="collection_name_unique_per_owner")]

    def __str__(self) -> str:
        return self.name


class Document(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued", _("Waiting to be read")
        READING = "reading", _("Reading")
        EMBEDDING = "embedding", _("Indexing")
        READY = "ready", _("Ready")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")

    class Kind(models.TextChoices):
        #: Read, chunked and indexed: answers quote its passages.
        TEXT = "text", "Text"
        #: A picture sent with a message: it goes to a vision model as it is, never read or indexed.
        IMAGE = "image", "Image"

    #: States in which ingestion is still to finish (the page polls these; cancel applies to them).
    IN_PROGRESS = (State.QUEUED, State.READING, State.EMBEDDING)

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="documents")
    conversation = models.ForeignKey(
        "chat.Conversation", null=True, blank=True, on_delete=models.CASCADE, related_name="documents"
    )
    collection = models.ForeignKey(
        Collection, null=True, blank=True, on_delete=models.CASCADE, related_name="documents"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.TEXT)
    name = models.CharField(max_length=255)
    file = models.FileField(upload_to="documents/%Y/%m/", max_length=500)
    content_type = models.CharField(max_length=120, blank=True)
    size_bytes = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    #: Why it failed, as a sentence for its owner ("This PDF is encrypted ..."); empty otherwise.
    failure = models.CharField(max_length=500, blank=True)
    pages = models.PositiveIntegerField(null=True, blank=True)
    #: A picture's size in pixels, read from its header at upload: what a prompt reserves for it.
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    chunks_total = models.PositiveIntegerField(default=0)
    chunks_done = models.PositiveIntegerField(default=0)
    #: The embedding model its vectors came from (a query is embedded by the same one).
    embedding_model = models.CharField(max_length=100, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created"]
        indexes = [
            models.Index(fields=["owner", "conversation"]),
            models.Index(fields=["owner", "collection"]),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def in_progress(self) -> bool:
        return self.state in self.IN_PROGRESS


class Chunk(models.Model):
    """A passage of a document: what retrieval finds, what the prompt quotes and a citation opens."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    ordinal = models.PositiveIntegerField()
    #: The page it starts on (PDF and Word pages from 1), if the format has pages.
    page = models.PositiveIntegerField(null=True, blank=True)
    #: The headings it sits under, outermost first, joined with " / ".
    heading = models.CharField(max_length=500, blank=True)
    text = models.TextField()
    tokens = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["document", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["document", "ordinal"], name="chunk_ordinal_unique")]

    def __str__(self) -> str:
        return f"{self.document} #{self.ordinal}"


class PagesRead(models.Model):
    """Pages read from one of a person's files, written when it is ready: what the plan's pages a month
    count (billing.Plan.pages_per_month). Kept when the file is deleted, so deleting gives none back."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    #: The document's id, not a key: the row outlives the file.
    document_id = models.PositiveBigIntegerField()
    pages = models.PositiveIntegerField()
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["owner", "created"])]

    def __str__(self) -> str:
        return f"{self.pages} pages"

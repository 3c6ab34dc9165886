"""Reading one uploaded file into indexed passages: the job a Celery task (or documents.runner) runs.

    queued -> reading (extract, count pages against the plan, screen the text, chunk)
           -> embedding (per batch of DOCUMENTS_EMBED_BATCH passages: reserve, embed, charge, save, index)
           -> ready

Every known failure ends in `failed` with a sentence for the owner (Document.failure): the file cannot
be read (encrypted, scanned, damaged, unsupported), the plan's pages a month, the content policy, the
token quota, the embedding servers. An unexpected error fails the file too (and is logged): nothing is
left queued or dropped silently.

Cancelling (documents.services.cancel_ingestion) and deleting only change the row. Every step here
moves the row on with an update conditional on it still being in progress, so the job notices at the
next step (between batches at the latest), stops, and removes the passages it had saved.

Embedding tokens are charged to the owner's usage ledger like /v1/embeddings': a reservation held for
the batch's upper bound (one token per UTF-8 byte), settled with the engine's own count, priced by
billing as embedding tokens. A batch's ledger row is keyed by the document and the batch, so a task
run twice (Celery redelivers a task whose worker died) is not charged twice.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing import services as billing
from config.refusals import Refusal
from documents import chunking, search, selectors
from documents.embedding import EmbeddedTexts, embed_texts, retrieval_model
from documents.extract import Extracted, ExtractionFailed, extract
from documents.models import Chunk, Document, PagesRead
from inference.errors import EngineError
from moderation import services as moderation

log = logging.getLogger(__name__)

# Why a file failed is saved with it (Document.failure), outside any request (documents.runner): the
# sentences are kept in English, marked for the catalogue (gettext_noop), so the page can show them translated.
UNEXPECTED = gettext_noop(
    "This file could not be read because of an error on our side. Upload it again; if it fails again, tell us."
)
MISSING = gettext_noop("The uploaded file could not be found in storage. Upload it again.")
#: Passages screened between two checks that the file is still wanted.
SCREEN_STEP = 100
STALLED = gettext_noop("Reading this file stopped before it finished (the server was restarted). Upload it again.")
UNAVAILABLE_POLICY = gettext_noop(
    "This file could not be checked against the content policy just now. Upload it again in a minute."
)


class Stopped(Exception):
    """The document was cancelled or deleted while it was being read."""


@dataclass(frozen=True)
class Outcome:
    state: str
    chunks: int = 0
    failure: str = ""


def _move(document_id: int, **fields) -> None:
    """Update the document if it is still in progress; Stopped if it is not (cancelled, deleted). Each
    step stamps `updated`, so a job that died is told from a slow one (fail_stalled)."""
    fields["updated"] = timezone.now()
    if not Document.objects.filter(pk=document_id, state__in=Document.IN_PROGRESS).update(**fields):
        raise Stopped


def _clear(document_id: int) -> None:
    """Remove every passage of the document and its index entries (a cancelled or failed read)."""
    Chunk.objects.filter(document_id=document_id).delete()
    search.remove_document(document_id)


def _fail(document_id: int, message: str) -> Outcome:
    _clear(document_id)
    Document.objects.filter(pk=document_id, state__in=Document.IN_PROGRESS).update(
        state=Document.State.FAILED, failure=message[:500]
    )
    return Outcome(Document.State.FAILED, failure=message)


def pages_of(extracted: Extracted) -> int:
    """The pages a file counts against the plan: a PDF's own, else its characters in pages."""
    if extracted.pages is not None:
        return extracted.pages
    return max(1, math.ceil(extracted.characters / settings.DOCUMENTS_CHARS_PER_PAGE))


def _screen(document: Document, pieces: list[chunking.Piece]) -> str | None:
    """The content policy's sentence if a passage is blocked; each passage is judged like a message."""
    for index, piece in enumerate(pieces):
        if index and index % SCREEN_STEP == 0:
            _move(document.pk)  # a long file: still moving, and still wanted (Stopped if cancelled)
        verdict = moderation.screen_input(document.owner, piece.text)
        if verdict.unavailable:
            return UNAVAILABLE_POLICY
        if not verdict.allowed:
            if piece.page:
                blocked = gettext_noop(
                    "This file was not indexed: a passage on page %(page)s goes against the content policy "
                    "(%(category)s)."
                )
            else:
                blocked = gettext_noop(
                    "This file was not indexed: a passage goes against the content policy (%(category)s)."
                )
            return blocked % {"page": piece.page, "category": verdict.category}
    return None


def _embed_batch(document: Document, texts: list[str], batch: int, period) -> EmbeddedTexts:
    """Embed one batch, charged to the owner's ledger. Raises a Refusal (quota) or an EngineError."""
    model = retrieval_model()
    bound = sum(len(text.encode("utf-8")) + 2 for text in texts)
    reservation = billing.reserve_quota(
        document.owner, bound, model=model.id, period=period, prompt_tokens=bound, answer=False
    )
    try:
        embedded = embed_texts(texts)
    except BaseException:
        billing.release(reservation)
        raise
    try:
        billing.settle(
            reservation,
            prompt_tokens=embedded.prompt_tokens,
            cached_tokens=0,
            completion_tokens=0,
            model=embedded.model,
            node=embedded.node,
            generation_id=f"doc:{document.pk}:{batch}",
            user=document.owner,
            period=period,
            embedding=True,
        )
    except DatabaseError:
        # As /v1/embeddings: the vectors are kept; the reservation lapses (BILLING_RESERVATION_TTL_SECONDS).
        log.exception("the usage of document %s batch %s could not be written", document.pk, batch)
    return embedded


def ingest(document_id: int) -> Outcome:
    """Read, chunk, screen, embed and index one document (see the module's docstring)."""
    try:
        return _ingest(document_id)
    except Stopped:
        _clear(document_id)
        return Outcome(Document.State.CANCELLED)
    except Exception:
        log.exception("reading document %s failed unexpectedly", document_id)
        return _fail(document_id, UNEXPECTED)


def _ingest(document_id: int) -> Outcome:
    document = Document.objects.select_related("owner").filter(pk=document_id).first()
    if document is None or not document.in_progress:
        return Outcome(document.state if document else "deleted")
    _move(document_id, state=Document.State.READING, failure="", chunks_done=0, chunks_total=0)
    _clear(document_id)  # a task run again starts over
    try:
        with document.file.open("rb") as handle:
            data = handle.read()
    except (FileNotFoundError, OSError):
        return _fail(document_id, MISSING)
    try:
        extracted = extract(document.name, data)
    except ExtractionFailed as failed:
        return _fail(document_id, failed.message)
    period = billing.current_period(document.owner)
    pages = pages_of(extracted)
    try:
        billing.check_pages(
            period.plan,
            pages=pages,
            pages_read=selectors.pages_read(document.owner.pk, period.period.start, period.period.end),
        )
        model = retrieval_model()
    except Refusal as refusal:
        return _fail(document_id, refusal.message)
    target, overlap = chunking.chunk_size_for(model.context_tokens)
    pieces = chunking.chunk(extracted.blocks, target=target, overlap=overlap)
    blocked = _screen(document, pieces)
    if blocked:
        return _fail(document_id, blocked)
    _move(
        document_id,
        state=Document.State.EMBEDDING,
        pages=extracted.pages,
        chunks_total=len(pieces),
        embedding_model=model.id,
    )
    size = max(1, settings.DOCUMENTS_EMBED_BATCH)
    for batch, start in enumerate(range(0, len(pieces), size)):
        part = pieces[start : start + size]
        _move(document_id)  # cancelled or deleted since the last batch: stop before embedding (and charging)
        try:
            embedded = _embed_batch(document, [p.text for p in part], batch, period)
        except Refusal as refusal:
            return _fail(document_id, refusal.message)
        except EngineError as exc:
            return _fail(
                document_id, gettext_noop("This file could not be indexed: %(reason)s") % {"reason": exc.user_message}
            )
        with transaction.atomic():
            _move(document_id, chunks_done=start + len(part))  # first: a cancelled document saves nothing
            chunks = Chunk.objects.bulk_create(
                Chunk(
                    document_id=document_id,
                    owner_id=document.owner.pk,
                    ordinal=start + index,
                    page=piece.page,
                    heading=piece.heading[:500],
                    text=piece.text,
                    tokens=piece.tokens,
                )
                for index, piece in enumerate(part)
            )
            search.index_chunks(chunks, embedded.vectors)
    with transaction.atomic():
        _move(document_id, state=Document.State.READY, chunks_done=len(pieces))
        PagesRead.objects.create(owner_id=document.owner.pk, document_id=document_id, pages=pages)
    return Outcome(Document.State.READY, chunks=len(pieces))


def fail_stalled(now: datetime | None = None) -> int:
    """Fail the files whose reading has not moved for DOCUMENTS_STALLED_MINUTES (the process or worker
    reading them died: a thread runner's jobs do not survive a restart), so none stays in progress for
    ever. Returns how many. Run by the beat (documents.tasks.fail_stalled_ingestions)."""
    cutoff = (now or timezone.now()) - timedelta(minutes=settings.DOCUMENTS_STALLED_MINUTES)
    stalled = list(
        Document.objects.filter(state__in=Document.IN_PROGRESS, updated__lt=cutoff).values_list("pk", flat=True)
    )
    for document_id in stalled:
        log.warning("reading document %s stalled; failing it", document_id)
        _fail(document_id, STALLED)
    return len(stalled)

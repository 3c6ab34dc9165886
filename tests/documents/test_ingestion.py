"""Reading an uploaded file into indexed passages, against the simulated embedding worker: the states the
page shows, a sentence for each failure, the ledger row of its embedding tokens, and a cancel that
arrives while it runs."""

import time
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from billing.models import UsageRecord
from billing.pricing import billable_embedding_tokens
from documents import ingestion, search, services
from documents.embedding import embed_texts
from documents.models import Chunk, Document, PagesRead
from moderation.models import Category, Flag
from tests.support.documents import PAGE_FACTS, encrypted_pdf, fact_pdf, scanned_pdf
from tests.support.plans import put_on_plan


def upload(user, data: bytes, name: str) -> Document:
    return services.upload_document(user, SimpleUploadedFile(name, data))


def read(user, data: bytes, name: str) -> Document:
    document = upload(user, data, name)
    ingestion.ingest(document.pk)  # the test's own thread: on_commit does not fire inside the test's transaction
    document.refresh_from_db()
    return document


@pytest.mark.django_db
def test_a_pdf_becomes_passages_with_pages_indexed_and_charged_to_the_ledger(user, retrieval):
    put_on_plan(user, "plus")
    document = read(user, fact_pdf(), "varnholm.pdf")
    assert (document.state, document.failure, document.pages) == (Document.State.READY, "", 3)
    assert document.chunks_done == document.chunks_total == Chunk.objects.filter(document=document).count() > 0
    assert document.embedding_model == retrieval
    page_three = [c for c in document.chunks.all() if PAGE_FACTS[2] in c.text]
    assert page_three and {c.page for c in page_three} == {3}
    assert PagesRead.objects.get(document_id=document.pk).pages == 3

    (row,) = UsageRecord.objects.filter(user=user)
    assert row.generation_id == f"doc:{document.pk}:0" and row.model == retrieval
    assert row.prompt_tokens > 0 and row.completion_tokens == 0
    assert row.billable_tokens == billable_embedding_tokens(row.prompt_tokens)

    question = "What is the secret ingredient of the fish soup?"
    (best,) = search.search(user.pk, [document.pk], question, embed_texts([question]).vectors[0], 1)
    assert (best.document_id, best.page) == (document.pk, 3) and PAGE_FACTS[2] in best.text


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "sentence"),
    [
        (encrypted_pdf(), "This PDF is protected by a password"),
        (scanned_pdf(), "This PDF has no text layer"),
        (b"%PDF-1.7 nothing more", "This PDF cannot be read: the file is damaged"),
    ],
)
def test_a_pdf_that_cannot_be_read_fails_with_its_sentence_and_nothing_is_charged(user, retrieval, data, sentence):
    document = read(user, data, "file.pdf")
    assert document.state == Document.State.FAILED and document.failure.startswith(sentence)
    assert not document.chunks.exists() and not UsageRecord.objects.exists() and not PagesRead.objects.exists()


@pytest.mark.django_db
def test_pages_beyond_the_plans_month_fail_the_file_naming_the_plan_that_reads_more(user, retrieval):
    put_on_plan(user, "free", pages_per_month=4)
    assert read(user, fact_pdf(), "one.pdf").state == Document.State.READY
    second = read(user, fact_pdf(), "two.pdf")
    assert second.state == Document.State.FAILED
    assert second.failure == (
        "This file has 3 pages, but only 1 of the 4 pages the Free plan reads a month are left. "
        "The allowance renews with your billing period. Plus allows 5,000 pages a month."
    )


@pytest.mark.django_db
def test_a_file_the_content_policy_blocks_fails_with_the_policys_sentence(
    user, retrieval, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        Category.objects.create(name="Fish secrets", words="smoked juniper")
    document = read(user, fact_pdf(), "soup.pdf")
    assert document.state == Document.State.FAILED
    assert document.failure == (
        "This file was not indexed: a passage on page 3 goes against the content policy (Fish secrets)."
    )
    assert Flag.objects.get(user=user, blocked=True).category == "Fish secrets"
    assert not UsageRecord.objects.exists()


@pytest.mark.django_db
def test_a_file_beyond_the_token_quota_fails_with_the_quota_sentence(user, retrieval):
    put_on_plan(user, "free", tokens_per_month=50)
    document = read(user, fact_pdf(), "soup.pdf")
    assert document.state == Document.State.FAILED
    assert document.failure.startswith("This request may use up to") and "Free plan" in document.failure
    assert not document.chunks.exists()


def wait_for(document_id: int, condition, seconds: float = 30) -> Document:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        document = Document.objects.get(pk=document_id)
        if condition(document):
            return document
        time.sleep(0.01)
    raise AssertionError(f"document {document_id} stayed {Document.objects.get(pk=document_id).state}")


@pytest.mark.django_db(transaction=True)
def test_an_upload_returns_at_once_and_is_read_in_the_background(user, retrieval):
    document = upload(user, fact_pdf(), "varnholm.pdf")
    assert document.state == Document.State.QUEUED
    ready = wait_for(document.pk, lambda d: not d.in_progress)
    assert (ready.state, ready.failure) == (Document.State.READY, "")
    services.delete_document(user, document.pk)
    assert not Chunk.objects.exists() and not Document.objects.exists()
    assert not document.file.storage.exists(document.file.name)


@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_passages_are_embedded_stops_the_job_and_removes_what_it_saved(user, retrieval, settings):
    settings.DOCUMENTS_EMBED_BATCH = 1
    text = "\n\n".join(f"Paragraph {i} tells of harbour boat number {i} and its crew of sailors." for i in range(600))
    document = upload(user, text.encode(), "long.txt")
    embedding = wait_for(document.pk, lambda d: d.chunks_done >= 2 or not d.in_progress)
    assert embedding.state == Document.State.EMBEDDING and embedding.chunks_done < embedding.chunks_total
    services.cancel_ingestion(user, document.pk)
    time.sleep(1)  # the job notices at its next batch
    stopped = Document.objects.get(pk=document.pk)
    assert stopped.state == Document.State.CANCELLED and stopped.chunks_done < stopped.chunks_total
    assert not Chunk.objects.filter(document_id=document.pk).exists()
    assert not PagesRead.objects.exists()
    question = "boat number 3"
    assert search.search(user.pk, [document.pk], question, embed_texts([question]).vectors[0], 5) == []


@pytest.mark.django_db
def test_a_read_that_stopped_moving_fails_with_a_sentence(user, settings):
    settings.DOCUMENTS_STALLED_MINUTES = 15
    stuck = upload(user, b"Some notes.", "a.txt")
    fresh = upload(user, b"Other notes.", "b.txt")
    Document.objects.filter(pk=stuck.pk).update(
        state=Document.State.EMBEDDING, updated=timezone.now() - timedelta(minutes=16)
    )
    assert ingestion.fail_stalled() == 1
    stuck.refresh_from_db()
    fresh.refresh_from_db()
    assert (stuck.state, stuck.failure) == (Document.State.FAILED, ingestion.STALLED)
    assert fresh.state == Document.State.QUEUED

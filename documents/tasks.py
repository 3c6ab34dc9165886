"""Background work for people's files, on Celery: reading one into indexed passages."""

from celery import shared_task

from documents import ingestion


@shared_task(ignore_result=True, acks_late=True)
def ingest_document(document_id: int) -> None:
    """Read, screen, embed and index an uploaded file (documents.ingestion); started by documents.runner."""
    ingestion.ingest(document_id)


@shared_task(ignore_result=True)
def fail_stalled_ingestions() -> None:
    """Files whose reading stopped moving (its process died) fail with a sentence instead of waiting for ever."""
    ingestion.fail_stalled()

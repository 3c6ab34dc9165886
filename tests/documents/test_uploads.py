"""Uploading, renaming, attaching and cancelling: the services the pages call, and the plan's limits on
files (413 naming the limit and the plan that allows more)."""

from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import SimpleUploadedFile

from billing.services import FileLimit
from config.refusals import BadInput, NotAllowed, NotFound
from documents import selectors, services
from documents.models import Document
from tests.chat.factories import conversation_for
from tests.support.documents import fact_pdf
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

MB = 1024 * 1024


def upload(user, data: bytes = b"Some notes.", name: str = "notes.txt", **where) -> Document:
    return services.upload_document(user, SimpleUploadedFile(name, data, content_type="text/plain"), **where)


def test_an_upload_is_stored_hashed_and_queued_and_reading_starts_after_commit(
    user, settings, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        document = upload(user, fact_pdf(), "../../etc/Varnholm.pdf")
    assert document.name == "Varnholm.pdf"  # a path in the name is not kept
    assert document.state == Document.State.QUEUED and document.conversation is None
    assert document.size_bytes == len(fact_pdf()) and len(document.sha256) == 64
    assert Path(settings.MEDIA_ROOT, document.file.name).read_bytes() == fact_pdf()
    assert len(callbacks) == 1  # start_ingestion, once the row is committed (not run here)
    assert list(selectors.pending_uploads(user)) == [document]


def test_an_unsupported_type_is_refused_naming_the_types_that_can_be_read(user):
    with pytest.raises(BadInput, match=r"\.exe files cannot be read\. Supported are PDF, Word \(\.docx\), HTML"):
        upload(user, b"MZ", "setup.exe")
    assert not Document.objects.exists()


def test_a_file_larger_than_the_plan_allows_is_413_with_the_plan_that_allows_more(user, settings):
    put_on_plan(user, "free", max_file_bytes=1 * MB)
    with pytest.raises(FileLimit) as refused:
        upload(user, b"x" * (MB + 1), "big.txt")
    assert refused.value.status == 413
    assert refused.value.message == (
        "This file is 1 MB; the Free plan allows files up to 1 MB. Plus allows files up to 25 MB."
    )
    assert refused.value.details["upgrade"] == "plus"
    assert not Document.objects.exists() and not list(Path(settings.MEDIA_ROOT).rglob("*.txt"))  # nothing stored


def test_storage_counts_every_file_the_person_keeps(user):
    put_on_plan(user, "free", storage_bytes=3000)
    upload(user, b"a" * 2000)
    with pytest.raises(
        FileLimit, match=r"Your files take 2 KB of the 2\.9 KB the Free plan allows, and this one is 1\.5 KB"
    ) as refused:
        upload(user, b"b" * 1500)
    assert refused.value.message.endswith("Delete files you no longer need. Plus allows 2 GB of files.")


def test_a_full_collection_refuses_another_file(user):
    put_on_plan(user, "pro", files_per_collection=1)
    library = services.create_collection(user, "Library")
    upload(user, collection=library)
    with pytest.raises(FileLimit, match="This collection holds 1 files, the most the Pro plan allows") as refused:
        upload(user, collection=library)
    assert refused.value.details["upgrade"] is None  # nothing above Pro
    upload(user)  # outside the collection, fine


def test_someone_elses_chat_or_collection_is_not_found(user, other_user):
    theirs = conversation_for(other_user)
    with pytest.raises(NotFound):
        upload(user, conversation=theirs)
    with pytest.raises(NotFound):
        upload(user, collection=services.create_collection(other_user, "Theirs"))


def test_pending_uploads_are_attached_to_the_chat_and_others_ids_are_refused(user, other_user):
    mine = [upload(user), upload(user, name="b.md")]
    theirs = upload(other_user)
    chat = conversation_for(user)
    with pytest.raises(NotFound):
        services.attach_to_conversation(user, [mine[0].pk, theirs.pk], chat)
    assert selectors.pending_uploads(user).count() == 2  # nothing attached when one id is refused
    attached = services.attach_to_conversation(user, [d.pk for d in mine], chat)
    assert {d.conversation_id for d in attached} == {chat.pk}
    assert list(selectors.documents_of(user, conversation_id=chat.pk).order_by("pk")) == mine
    with pytest.raises(BadInput, match="already belongs to another chat"):
        services.attach_to_conversation(user, [mine[0].pk], conversation_for(user))
    with pytest.raises(NotFound):
        services.attach_to_conversation(other_user, [theirs.pk], chat)


def test_rename_and_cancel(user, other_user):
    document = upload(user)
    assert services.rename_document(user, document.pk, "  folder/Better name.txt ").name == "Better name.txt"
    with pytest.raises(NotFound):
        services.rename_document(other_user, document.pk, "mine now")
    cancelled = services.cancel_ingestion(user, document.pk)
    assert cancelled.state == Document.State.CANCELLED
    progress = selectors.progress(cancelled)
    assert (progress.label, progress.in_progress, progress.percent) == ("Cancelled", False, None)
    with pytest.raises(NotAllowed, match="is no longer being read"):
        services.cancel_ingestion(user, document.pk)


def test_collections_count_their_files(user):
    library = services.create_collection(user, "Library")
    upload(user, b"12345", collection=library)
    with pytest.raises(BadInput, match="already have a collection"):
        services.create_collection(user, " Library ")
    (listed,) = selectors.collections_of(user)
    assert (listed.name, listed.files, listed.size_bytes) == ("Library", 1, 5)
    assert services.rename_collection(user, library.pk, "Books").name == "Books"


def test_a_file_object_without_a_content_type_uploads_too(user):
    document = services.upload_document(user, ContentFile(b"# Title\n\ntext", name="x.md"))
    assert document.content_type == "" and document.name == "x.md"


def test_deleting_a_chat_or_an_account_removes_its_files_from_storage(
    user, settings, django_capture_on_commit_callbacks
):
    chat = conversation_for(user)
    in_chat = upload(user, conversation=chat)
    pending = upload(user, name="pending.md")
    stored = Path(settings.MEDIA_ROOT)
    assert len(list(stored.rglob("*.*"))) == 2
    with django_capture_on_commit_callbacks(execute=True):
        chat.delete()
    assert [p.name for p in stored.rglob("*.*")] == [Path(pending.file.name).name]
    assert not Document.objects.filter(pk=in_chat.pk).exists()
    with django_capture_on_commit_callbacks(execute=True):
        user.delete()
    assert not list(stored.rglob("*.*"))

"""A person's files are theirs: they leave storage with their chat or their account, and the data
export carries them as uploaded."""

import io
import json
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from chat.data_export.services import build_archive
from chat.services import delete_conversation
from documents import services
from documents.models import Collection, Document
from tests.chat.factories import conversation_for
from tests.support.documents import fact_pdf

pytestmark = pytest.mark.django_db


def upload(user, name: str, data: bytes, **where) -> Document:
    return services.upload_document(user, SimpleUploadedFile(name, data), **where)


def test_deleting_a_chat_or_an_account_removes_their_files_from_storage(
    user, other_user, settings, django_capture_on_commit_callbacks
):
    chat = conversation_for(user)
    in_chat = upload(user, "minutes.txt", b"Minutes of the meeting.", conversation=chat)
    kept = Collection.objects.create(owner=user, name="Kept")
    in_collection = upload(user, "report.pdf", fact_pdf(), collection=kept)
    theirs = upload(other_user, "theirs.txt", b"Not yours.")
    path = lambda d: Path(settings.MEDIA_ROOT, d.file.name)  # noqa: E731

    with django_capture_on_commit_callbacks(execute=True):
        delete_conversation(user, chat.pk)
    assert not path(in_chat).exists() and path(in_collection).exists()

    with django_capture_on_commit_callbacks(execute=True):
        user.delete()
    assert not path(in_collection).exists()
    assert path(theirs).exists() and Document.objects.filter(pk=theirs.pk).exists()


def test_the_data_export_carries_each_file_as_uploaded_and_the_collections(user, other_user):
    chat = conversation_for(user)
    upload(user, "minutes.txt", b"Minutes of the meeting.", conversation=chat)
    kept = Collection.objects.create(owner=user, name="Kept")
    kept.conversations.add(chat)
    report = upload(user, "Q3 report.pdf", fact_pdf(), collection=kept)
    upload(other_user, "theirs.txt", b"Not yours.")

    export = build_archive(user, site_url="https://chat.example.com")
    archive = zipfile.ZipFile(io.BytesIO(export.file.read()))
    names = archive.namelist()
    root = names[0].split("/")[0]

    listed = json.loads(archive.read(f"{root}/files.json"))
    by_name = {f["name"]: f for f in listed["files"]}
    assert set(by_name) == {"minutes.txt", "Q3 report.pdf"}
    assert archive.read(f"{root}/{by_name['Q3 report.pdf']['file']}") == fact_pdf()
    assert by_name["Q3 report.pdf"]["collection"] == "Kept" and by_name["Q3 report.pdf"]["sha256"] == report.sha256
    assert by_name["minutes.txt"]["conversation_id"] == chat.pk
    assert listed["collections"] == [
        {"name": "Kept", "created": kept.created.isoformat(), "conversation_ids": [chat.pk]}
    ]
    assert not any("theirs" in name for name in names)

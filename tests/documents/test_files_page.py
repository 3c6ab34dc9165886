"""The files page (/accounts/files/): a person's collections and files, made, filled, renamed, deleted
and cancelled there; each refusal said on the page; nothing of anyone else's reachable."""

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from documents import services
from documents.models import Collection, Document
from tests.support.accounts import signed_in
from tests.support.plans import put_on_plan

pytestmark = pytest.mark.django_db

PAGE = "/accounts/files/"


def note(name: str = "notes.txt", data: bytes = b"Some notes.") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="text/plain")


def test_a_collection_is_made_filled_renamed_and_deleted_with_its_files(
    user, settings, django_capture_on_commit_callbacks
):
    page = signed_in(user)

    page.post(PAGE, {"new_collection": "1", "name": "  Contracts  "})
    contracts = Collection.objects.get(owner=user)
    assert contracts.name == "Contracts"

    response = page.post(PAGE, {"upload_to": contracts.pk, "file": [note("a.txt"), note("b.md")]}, follow=True)
    assert "Added 2 files to “Contracts”: reading now." in response.content.decode()
    assert sorted(contracts.documents.values_list("name", flat=True)) == ["a.txt", "b.md"]
    stored = [Path(settings.MEDIA_ROOT, d.file.name) for d in contracts.documents.all()]
    assert all(path.exists() for path in stored)

    page.post(PAGE, {"rename_collection": contracts.pk, "name": "Leases"})
    assert Collection.objects.get(pk=contracts.pk).name == "Leases"
    listed = page.get(PAGE).content.decode()
    assert "Leases" in listed and "a.txt" in listed

    with django_capture_on_commit_callbacks(execute=True):
        response = page.post(PAGE, {"delete_collection": contracts.pk}, follow=True)
    assert "Deleted the collection “Leases” and its files." in response.content.decode()
    assert not Collection.objects.exists() and not Document.objects.exists()
    # The stored copies go too, once the deletion is committed.
    assert not any(path.exists() for path in stored)


def test_a_refusal_is_said_on_the_page_and_nothing_is_kept(user):
    put_on_plan(user, "free", max_file_bytes=5)
    page = signed_in(user)
    page.post(PAGE, {"new_collection": "1", "name": "Notes"})
    notes = Collection.objects.get(owner=user)

    response = page.post(PAGE, {"upload_to": notes.pk, "file": note(data=b"more than five bytes")}, follow=True)

    assert response.status_code == 200
    assert "the Free plan allows files up to 5 bytes" in response.content.decode()
    assert not Document.objects.exists()

    response = page.post(PAGE, {"new_collection": "1", "name": "Notes"}, follow=True)
    assert "You already have a collection called “Notes”." in response.content.decode()


def test_another_persons_file_or_collection_cannot_be_touched(user, other_user):
    theirs = Collection.objects.create(owner=other_user, name="Private")
    their_file = services.upload_document(other_user, note("secret.txt"), collection=theirs)
    page = signed_in(user)

    for action in (
        {"delete": their_file.pk},
        {"rename": their_file.pk, "name": "mine now"},
        {"delete_collection": theirs.pk},
        {"upload_to": theirs.pk, "file": note()},
    ):
        response = page.post(PAGE, action, follow=True)
        assert response.status_code == 200
        assert "secret.txt" not in response.content.decode()

    assert Document.objects.get(pk=their_file.pk).name == "secret.txt"
    assert Collection.objects.filter(pk=theirs.pk).exists()
    assert not Document.objects.filter(owner=user).exists()


def test_the_page_needs_a_signed_in_person(client):
    response = client.get(PAGE)
    assert response.status_code == 302 and response.url.startswith(reverse("account_login"))

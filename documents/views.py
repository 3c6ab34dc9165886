"""The files page: everything a person has uploaded, each file's state (and why one failed), rename,
delete. Thin: documents.services decides."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_http_methods

from config.refusals import BadInput, Refusal
from config.text import whole_number
from documents import selectors, services


def _id(value: str) -> int:
    document_id = whole_number(value)
    if document_id is None:
        raise BadInput(_("That is not a file's id."))
    return document_id


def _act(request: HttpRequest) -> str:
    """One form's action on the files page; the sentence that says what was done."""
    user, post = request.user, request.POST
    if "delete" in post:
        deleted = services.delete_document(user, _id(post["delete"]))
        return _("Deleted “%(name)s”: answers can no longer cite it.") % {"name": deleted.name}
    if "rename" in post:
        renamed = services.rename_document(user, _id(post["rename"]), post.get("name", ""))
        return _("Renamed to “%(name)s”.") % {"name": renamed.name}
    if "cancel" in post:
        cancelled = services.cancel_ingestion(user, _id(post["cancel"]))
        return _("Stopped reading “%(name)s”.") % {"name": cancelled.name}
    if "new_collection" in post:
        created = services.create_collection(user, post.get("name", ""))
        return _("Made the collection “%(name)s”.") % {"name": created.name}
    if "rename_collection" in post:
        renamed = services.rename_collection(user, _id(post["rename_collection"]), post.get("name", ""))
        return _("Renamed the collection to “%(name)s”.") % {"name": renamed.name}
    if "delete_collection" in post:
        deleted = services.delete_collection(user, _id(post["delete_collection"]))
        return _("Deleted the collection “%(name)s” and its files.") % {"name": deleted.name}
    if "upload_to" in post:
        collection = selectors.collection_for(user, _id(post["upload_to"]))
        uploads = request.FILES.getlist("file")
        if not uploads:
            raise BadInput(_("Choose a file to add to the collection."))
        for upload in uploads:
            services.upload_document(user, upload, collection=collection)
        return ngettext(
            "Added %(count)s file to “%(name)s”: reading now.",
            "Added %(count)s files to “%(name)s”: reading now.",
            len(uploads),
        ) % {"count": len(uploads), "name": collection.name}
    raise BadInput(_("That form asked for nothing this page does."))


@login_required
@require_http_methods(["GET", "POST"])
def files_page(request: HttpRequest) -> HttpResponse:
    """The person's files and collections: each file's state (why one failed), rename, delete, cancel a
    reading; collections made, renamed, deleted and filled here, then used in any chat."""
    if request.method == "POST":
        try:
            messages.success(request, _act(request))
        except Refusal as refusal:  # said on the page the form was on, which keeps everything else
            messages.error(request, refusal.message)
        return redirect("account_files")
    documents = list(selectors.documents_of(request.user).select_related("conversation", "collection"))
    collections = list(selectors.collections_of(request.user))
    return render(
        request,
        "documents/files.html",
        {
            "chat_files": [d for d in documents if d.collection_id is None],
            "collections": [(c, [d for d in documents if d.collection_id == c.pk]) for c in collections],
            "reading": any(d.in_progress for d in documents),
        },
    )

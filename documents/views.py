"""The files page: everything a person has uploaded, each file's state (and why one failed), rename,
delete. Thin: documents.services decides."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from config.refusals import BadInput
from config.text import whole_number
from documents import selectors, services


def _id(value: str) -> int:
    document_id = whole_number(value)
    if document_id is None:
        raise BadInput("That is not a file's id.")
    return document_id


@login_required
@require_http_methods(["GET", "POST"])
def files_page(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        if "delete" in request.POST:
            name = services.delete_document(request.user, _id(request.POST["delete"])).name
            messages.success(request, f"Deleted “{name}”: answers can no longer cite it.")
        elif "rename" in request.POST:
            renamed = services.rename_document(request.user, _id(request.POST["rename"]), request.POST.get("name", ""))
            messages.success(request, f"Renamed to “{renamed.name}”.")
        elif "cancel" in request.POST:
            cancelled = services.cancel_ingestion(request.user, _id(request.POST["cancel"]))
            messages.success(request, f"Stopped reading “{cancelled.name}”.")
        return redirect("account_files")
    documents = list(selectors.documents_of(request.user).select_related("conversation", "collection"))
    return render(
        request,
        "documents/files.html",
        {"documents": documents, "reading": any(d.in_progress for d in documents)},
    )

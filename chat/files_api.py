"""The chat page's files: upload in the composer, watch ingestion, cancel, rename, delete, and open a
cited passage. Thin: parse, call documents.services, render (documents.serializers)."""

from __future__ import annotations

from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from chat import selectors
from chat.http import json_body, json_endpoint
from config.refusals import BadInput, NotFound
from config.text import whole_number
from documents import retrieval, services
from documents import selectors as documents_selectors
from documents.models import Chunk
from documents.serializers import collection_json, document_json, passage_json


def _whole(value: str, name: str) -> int:
    number = whole_number(value)
    if number is None:
        raise BadInput(f"{name} must be a whole number.")
    return number


@require_http_methods(["GET", "POST"])
@json_endpoint
def documents(request: HttpRequest) -> JsonResponse:
    """GET: the signed-in person's files (`?ids=1,2` for some of them: the composer's polling).
    POST (multipart, field `file`, optional `conversation_id` or `collection_id`): upload one; it is read
    in the background."""
    if request.method == "POST":
        upload = request.FILES.get("file")
        if upload is None:
            raise BadInput(_("Choose a file to upload."))
        conversation = collection = None
        if request.POST.get("conversation_id"):
            conversation = selectors.get_conversation(
                request.user, _whole(request.POST["conversation_id"], "conversation_id")
            )
        if request.POST.get("collection_id"):
            collection = documents_selectors.collection_for(
                request.user, _whole(request.POST["collection_id"], "collection_id")
            )
        document = services.upload_document(request.user, upload, conversation=conversation, collection=collection)
        return JsonResponse(document_json(document), status=201)
    ids = None
    if request.GET.get("ids"):
        ids = [whole_number(i) for i in request.GET["ids"].split(",")[:50]]
        if None in ids:  # ASCII digits only, as every id from a query string (config.text.whole_number)
            raise BadInput("ids must be whole numbers separated by commas.")
    found = documents_selectors.documents_of(request.user)
    if ids is not None:
        found = found.filter(pk__in=ids)
    return JsonResponse({"documents": [document_json(d) for d in found]})


@require_http_methods(["PATCH", "DELETE"])
@json_endpoint
def document(request: HttpRequest, document_id: int) -> HttpResponse:
    if request.method == "DELETE":
        services.delete_document(request.user, document_id)
        return HttpResponse(status=204)
    name = json_body(request).get("name")
    return JsonResponse(document_json(services.rename_document(request.user, document_id, name)))


@require_POST
@json_endpoint
def cancel(request: HttpRequest, document_id: int) -> JsonResponse:
    return JsonResponse(document_json(services.cancel_ingestion(request.user, document_id)))


@require_GET
@json_endpoint
def picture(request: HttpRequest, picture_id: int) -> HttpResponse:
    """One of the person's pictures (sent with a message), shown in the chat: its owner's only, as the
    type its own bytes said at upload, never as a page (a file of another kind is not served here)."""
    document = documents_selectors.picture_for(request.user, picture_id)
    # Asked again each time it is shown (no-cache), answered 304 while unchanged: a deleted picture (or
    # a signed-out browser) never shows from the cache.
    etag = f'"{document.sha256}"'
    if etag in request.headers.get("If-None-Match", ""):
        response = HttpResponse(status=304)
    else:
        try:
            stored = document.file.open("rb")
        except OSError as gone:
            raise NotFound(_("This picture's file is no longer stored.")) from gone
        response = FileResponse(stored, content_type=document.content_type)
        response["Content-Disposition"] = "inline"
        response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-cache"
    return response


@require_GET
@json_endpoint
def passage(request: HttpRequest, chunk_id: int) -> JsonResponse:
    """A cited passage, with the text around it, for the side panel: its owner's only."""
    try:
        found = retrieval.passage_for(request.user.pk, chunk_id)
    except Chunk.DoesNotExist as exc:
        raise NotFound(_("That passage is not in any of your files (the file may have been deleted).")) from exc
    return JsonResponse(passage_json(*found))


@require_http_methods(["GET", "POST"])
@json_endpoint
def collection_list(request: HttpRequest) -> JsonResponse:
    """GET: the person's collections. POST {"name"}: a new one."""
    if request.method == "POST":
        created = services.create_collection(request.user, json_body(request).get("name"))
        return JsonResponse(collection_json(created), status=201)
    return JsonResponse({"collections": [collection_json(c) for c in documents_selectors.collections_of(request.user)]})

"""The owner's JSON endpoint for a conversation's shared link (docs/chat-protocol.md). Thin."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from chat.http import json_body, json_endpoint, optional_id
from chat.models import SharedConversation
from chat.serializers import _iso
from chat.sharing import selectors, services


def share_url(request: HttpRequest, share: SharedConversation) -> str:
    return request.build_absolute_uri(reverse("shared-conversation", args=[share.token]))


def share_json(request: HttpRequest, share: SharedConversation | None) -> dict | None:
    if share is None:
        return None
    return {
        "id": share.pk,
        "conversation_id": share.conversation_id,
        "url": share_url(request, share),
        "mode": share.mode,
        "show_owner_name": share.show_owner_name,
        "show_passages": share.show_passages,
        "messages": len(share.message_ids) if share.mode == SharedConversation.Mode.SNAPSHOT else None,
        "created": _iso(share.created),
        "updated": _iso(share.updated),
    }


@require_http_methods(["GET", "POST", "DELETE"])
@json_endpoint
def conversation_share(request: HttpRequest, conversation_id: int) -> HttpResponse:
    if request.method == "DELETE":
        services.revoke_conversation_share(request.user, conversation_id)
        return HttpResponse(status=204)
    status = 200
    if request.method == "POST":
        data = json_body(request)
        share, created = services.share_conversation(
            request.user,
            conversation_id,
            mode=data.get("mode", SharedConversation.Mode.SNAPSHOT),
            show_owner_name=data.get("show_owner_name", False),
            show_passages=data.get("show_passages", False),
            leaf_id=optional_id(data.get("leaf_id"), "leaf_id"),
        )
        status = 201 if created else 200
    else:
        share = selectors.conversation_share(request.user, conversation_id)
    # The name the page would show if the owner chose to (never their email).
    return JsonResponse(
        {"share": share_json(request, share), "owner_name": request.user.display_name.strip()}, status=status
    )

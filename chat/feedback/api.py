"""The chat page's JSON endpoint for rating an answer (docs/chat-protocol.md). Thin: parse, call, render."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_http_methods

from chat.feedback import services
from chat.http import json_body, json_endpoint
from chat.serializers import feedback_json


@require_http_methods(["PUT", "DELETE"])
@json_endpoint
def message_feedback(request: HttpRequest, message_id: int) -> HttpResponse:
    if request.method == "DELETE":
        services.withdraw_rating(request.user, message_id)
        return HttpResponse(status=204)
    data = json_body(request)
    feedback, created = services.rate_answer(
        request.user,
        message_id,
        data.get("rating"),
        data.get("comment", services.KEEP),
    )
    return JsonResponse({"message_id": message_id, "feedback": feedback_json(feedback)}, status=201 if created else 200)

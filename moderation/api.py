"""The chat page's JSON endpoint for reporting an answer to staff (docs/moderation.md). Thin."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_POST

from chat.http import json_body, json_endpoint
from moderation import services


@require_POST
@json_endpoint
def report_message(request: HttpRequest, message_id: int) -> HttpResponse:
    data = json_body(request)
    flag, created = services.report_answer(request.user, message_id, data.get("reason", ""))
    return JsonResponse(
        {"message_id": message_id, "report": {"id": flag.pk, "created": flag.created.isoformat()}},
        status=201 if created else 200,
    )

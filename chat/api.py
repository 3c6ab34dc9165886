"""The chat page's JSON API and the SSE endpoint (docs/chat-protocol.md). Thin: parse, call, render."""

from __future__ import annotations

from contextlib import aclosing

from channels.db import database_sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from billing import services as billing
from chat import exports, reports, selectors, services
from chat.generation import actions
from chat.generation.start import Turn
from chat.generation.turn import default_model
from chat.http import files_sent, json_body, json_endpoint, optional_id
from chat.serializers import conversation_json, message_json
from chat.sse import STREAM_HEADERS, answer_events, event
from config.http import JSON, client_ip, refusal_response, speaks
from config.overload import reads_an_accepted_answer
from config.refusals import BadInput, NotFound
from config.text import whole_number


def _turn_json(turn: Turn) -> dict:
    return {
        "conversation": conversation_json(turn.conversation, generating=True),
        "user_message": message_json(turn.user_message),
        "assistant_message": message_json(turn.assistant_message),
    }


def _turn_response(request: HttpRequest, turn: Turn) -> HttpResponse:
    """201 with the turn; to a client that accepts `text/event-stream`, the turn as the stream's first
    event and then its answer's frames, so one request carries the whole answer. The answer's own
    stream URL stays the way to resume it (from the last event id) and to follow it from other tabs."""
    if "text/event-stream" not in request.headers.get("Accept", ""):
        return JsonResponse(_turn_json(turn), status=201)
    response = StreamingHttpResponse(_turn_events(turn), status=201, content_type="text/event-stream")
    for name, value in STREAM_HEADERS.items():
        response[name] = value
    return response


async def _turn_events(turn: Turn):
    yield event("turn", _turn_json(turn))
    # Closed at once when the reader leaves (Django cancels the response), not when collected.
    async with aclosing(answer_events(turn.assistant_message, None)) as frames:
        async for chunk in frames:
            yield chunk


@require_GET
@json_endpoint
def models(request: HttpRequest) -> JsonResponse:
    plan = billing.effective_plan(request.user)
    return JsonResponse(
        {
            "models": selectors.model_menu(plan),
            "default": default_model(plan, request.user.default_model).id,
            "plan": plan.slug,
        }
    )


@require_http_methods(["GET", "POST"])
@json_endpoint
def conversations(request: HttpRequest) -> JsonResponse:
    if request.method == "POST":
        data = json_body(request)
        conversation = services.create_conversation(
            request.user,
            title=data.get("title", ""),
            model=data.get("model"),
            system_prompt=data.get("system_prompt"),
        )
        return JsonResponse(conversation_json(conversation, generating=False, detail=True), status=201)
    archived = request.GET.get("archived") in {"1", "true"}
    found = selectors.conversations_for(request.user, query=request.GET.get("q", ""), archived=archived)[:200]
    return JsonResponse({"conversations": [conversation_json(c) for c in found]})


@require_http_methods(["GET", "PATCH", "DELETE"])
@json_endpoint
def conversation(request: HttpRequest, conversation_id: int) -> HttpResponse:
    if request.method == "DELETE":
        services.delete_conversation(request.user, conversation_id)
        return HttpResponse(status=204)
    if request.method == "PATCH":
        updated = services.update_conversation(request.user, conversation_id, json_body(request))
        return JsonResponse(conversation_json(updated, detail=True))
    found = selectors.get_conversation(request.user, conversation_id)
    leaf, before = _message_id(request, "leaf"), _message_id(request, "before")
    limit = whole_number(request.GET.get("limit", str(selectors.PAGE_MESSAGES)), MAX_PAGE_MESSAGES)
    if not limit:
        raise BadInput(f"limit must be a whole number from 1 to {MAX_PAGE_MESSAGES}.")
    messages, has_earlier = selectors.branch_page(found, leaf, before_id=before, limit=limit)
    return JsonResponse(
        {
            "conversation": conversation_json(found, detail=True),
            "messages": [message_json(m) for m in messages],
            "has_earlier": has_earlier,
        }
    )


MAX_PAGE_MESSAGES = 500


def _message_id(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name)
    if value is None or value == "":
        return None
    message_id = whole_number(value)
    if message_id is None:
        raise BadInput(f"{name} must be a message id.")
    return message_id


@require_GET
@json_endpoint
def export(request: HttpRequest, conversation_id: int) -> HttpResponse:
    found = selectors.get_conversation(request.user, conversation_id)
    kind = request.GET.get("format", "md")
    if kind not in exports.FORMATS:
        raise BadInput("format must be md or json.")
    body, content_type, filename = exports.export(found, kind)
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_POST
@json_endpoint
async def send(request: HttpRequest) -> HttpResponse:
    data = json_body(request)
    turn = await actions.send_message(
        await request.auser(),
        content=data.get("content"),
        conversation_id=optional_id(data.get("conversation_id"), "conversation_id"),
        model=data.get("model"),
        parent_id=optional_id(data.get("parent_id"), "parent_id"),
        files=files_sent(data),
        ip=client_ip(request),
    )
    return _turn_response(request, turn)


@require_POST
@json_endpoint
async def regenerate(request: HttpRequest, message_id: int) -> HttpResponse:
    model = json_body(request).get("model")  # none: the conversation's; the larger one under an Auto answer
    turn = await actions.regenerate(await request.auser(), message_id, ip=client_ip(request), model=model)
    return _turn_response(request, turn)


@require_POST
@json_endpoint
async def continue_answer(request: HttpRequest, message_id: int) -> HttpResponse:
    turn = await actions.continue_answer(await request.auser(), message_id, ip=client_ip(request))
    return _turn_response(request, turn)


@require_POST
@json_endpoint
async def edit(request: HttpRequest, message_id: int) -> HttpResponse:
    data = json_body(request)
    user = await request.auser()
    turn = await actions.edit_and_resend(user, message_id, data.get("content"), ip=client_ip(request))
    return _turn_response(request, turn)


@require_POST
@json_endpoint
async def stop(request: HttpRequest, message_id: int) -> JsonResponse:
    message = await actions.stop(await request.auser(), message_id)
    payload = await database_sync_to_async(message_json)(message)
    return JsonResponse({"message": payload}, status=202 if message.is_active else 200)


@speaks(JSON)
@reads_an_accepted_answer
def stream(request: HttpRequest, message_id: int) -> HttpResponse:
    """Answers' SSE streams are served by chat.answer_stream in the ASGI application (config/asgi.py),
    in front of Django; this URL exists so the rest of the code can name it (reverse()), and so that
    what answers on it is known to speak the chat's JSON (config.http)."""
    return refusal_response(request, NotFound("Answer streams are served by the ASGI application (Daphne)."))


@require_POST
@json_endpoint
def report_message(request: HttpRequest, message_id: int) -> HttpResponse:
    """Report an answer to staff (docs/moderation.md): 201 with the new report, 200 when it was reported already."""
    data = json_body(request)
    flag, created = reports.report_answer(request.user, message_id, data.get("reason", ""))
    return JsonResponse(
        {"message_id": message_id, "report": {"id": flag.pk, "created": flag.created.isoformat()}},
        status=201 if created else 200,
    )

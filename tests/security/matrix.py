"""Trying one route as each actor: the request each sends, and what it got, in the matrix's words."""

from __future__ import annotations

import json

from django.contrib.contenttypes.models import ContentType

from chat.models import Conversation
from evals.models import EvalSet
from tests.security.authz_world import ACTORS, World
from tests.security.routes import NO_SUCH_OBJECT, Route, admin_model, fill, parameters

#: What a request's answer counts as: its status, or "login" for a redirect to a sign-in page.
LOGIN = "login"

# The chat's JSON endpoints also take PATCH, PUT and DELETE; everything else is tried with GET and POST.
JSON_PREFIX = "/chat/api/"
JSON_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
OTHER_METHODS = ("GET", "POST")


def methods_for(route: Route) -> tuple[str, ...]:
    return JSON_METHODS if route.route.startswith(JSON_PREFIX) else OTHER_METHODS


def values_for(route: Route, world: World) -> dict[str, str]:
    """URL parameters naming the owner's objects (an answer, their conversation, their share...)."""
    message = world.answer
    if route.name == "chat:message-regenerate":
        # Regenerating the question is refused (400) after the ownership check, so the owner's
        # attempt proves they got past it without starting a generation on an engine.
        message = world.question
    model = admin_model(route.route)
    first = model._default_manager.order_by("pk").values_list("pk", flat=True).first() if model else None
    return {
        "conversation_id": str(world.conversation.pk),
        "message_id": str(message.pk),
        "token": world.share.token,
        "warning_id": str(world.warning.pk),
        "key_id": str(world.api_key_id),
        "slug": "pro",
        "model_id": "sim-small",
        "language": "fr",
        "response_id": "resp_not-one-of-yours",  # a session never reaches a stored response: 401
        "key": "not-a-key",
        "uidb36": "1",
        "provider_id": "no-such-provider",
        "object_id": str(first) if first is not None else NO_SUCH_OBJECT,
        "set_id": str(EvalSet.objects.order_by("pk").values_list("pk", flat=True).first()),
        "user_id": str(world.owner.pk),
        "id": str(world.owner.pk),
        "flag_id": str(world.flag.pk),
        "document_id": str(world.document.pk),
        "chunk_id": str(world.chunk.pk),
        "picture_id": str(world.picture.pk),
        "action": "ban",
        "content_type_id": str(ContentType.objects.get_for_model(Conversation).pk),
        "app_label": "chat",
        "url": "no-such-page/",
    }


def body_for(route: Route, world: World) -> dict:
    """A JSON body that gets past parsing to the rule under test (ownership, then the action's own)."""
    if route.name == "chat:send":
        # An unknown model: refused (400) once the conversation is found to be the sender's, 404 before.
        return {"content": "Hello", "conversation_id": world.conversation.pk, "model": "no-such-model"}
    if route.name == "chat:message-feedback":
        return {"rating": "down"}
    if route.name == "api:chat-completions":
        return {"model": "sim-small", "messages": [{"role": "user", "content": "Hello"}]}
    return {}


def outcome(response) -> int | str:
    if response.status_code in (301, 302, 303) and "/login/" in response.get("Location", ""):
        return LOGIN
    return response.status_code


def request(client, method: str, path: str, route: Route, world: World):
    if (route.route.startswith(JSON_PREFIX) or route.name == "api:chat-completions") and method != "GET":
        return client.generic(method, path, json.dumps(body_for(route, world)), content_type="application/json")
    return client.generic(method, path)


def observe(route: Route, world: World) -> dict[str, dict[str, int | str]]:
    """{method: {actor: outcome}} for one route, every actor trying every method."""
    path = fill(route.route, values_for(route, world))
    seen: dict[str, dict[str, int | str]] = {method: {} for method in methods_for(route)}
    for actor in ACTORS:
        client = world.client(actor)
        for method in methods_for(route):
            seen[method][actor] = outcome(request(client, method, path, route, world))
    return seen


def route_has_parameters(route: Route) -> bool:
    return bool(parameters(route.route))

"""The chat page. Everything after the first render goes through chat.api and the WebSocket."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse

from billing import services as billing
from billing.views import landing
from chat import selectors
from chat.generation.turn import default_model
from moderation.selectors import unseen_warnings


def _url_or_none(name: str) -> str | None:
    try:
        return reverse(name)
    except NoReverseMatch:
        return None


def home(request: HttpRequest) -> HttpResponse:
    """`/`: the chat for people who are signed in; for everyone else, what the product is and costs."""
    if request.user.is_authenticated:
        return chat_page(request)
    return landing(request)


@login_required
def chat_page(request: HttpRequest, conversation_id: int | None = None) -> HttpResponse:
    if conversation_id is not None:
        selectors.get_conversation(request.user, conversation_id)  # 404 for anyone else's
    plan = billing.effective_plan(request.user)
    start_with = default_model(plan, request.user.default_model)
    bootstrap = {
        "user": {"email": request.user.email, "name": request.user.get_short_name()},
        "conversation_id": conversation_id,
        "models": selectors.model_menu(plan),
        "default_model": start_with.id,
        # The Settings page's choice, while the plan allows it: it beats the last model picked on this device.
        "preferred_model": start_with.id if start_with.id == request.user.default_model else None,
        "plan": {"slug": plan.slug, "name": plan.name, "priority": plan.priority_class},
        "limits": {"system_prompt_chars": settings.CHAT_MAX_SYSTEM_PROMPT_CHARS},
        "engine_simulated": settings.SGLANG_SIMULATED,
        "ws_url": "/ws/chat/",
        "api_base": "/chat/api/",
        "urls": {
            "plans": _url_or_none("billing:plans"),
            "usage": _url_or_none("billing:usage"),
            "settings": reverse("settings"),
            "theme": reverse("settings-theme"),
        },
    }
    context = {"bootstrap": bootstrap, "warnings": unseen_warnings(request.user)}
    return render(request, "chat/chat.html", context)

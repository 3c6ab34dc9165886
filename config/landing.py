"""`/`: the chat for people who are signed in; for everyone else, what the product is and costs."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from billing import selectors as billing
from chat.views import chat_page


def home(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return chat_page(request)
    return landing(request)


def landing(request: HttpRequest) -> HttpResponse:
    plans = [
        {
            "plan": plan,
            "models": [model.name for model in billing.plan_models(plan)],
            "context": billing.context_words(plan),
        }
        for plan in billing.public_plans()
    ]
    return render(request, "landing.html", {"plans": plans, "engine_simulated": settings.SGLANG_SIMULATED})

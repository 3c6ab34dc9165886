"""Billing pages and endpoints: parse, call a service or selector, render. No rule is decided here."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from billing import pricing, selectors
from billing.http import rate_limited
from billing.providers import ReturnUrls, get_provider
from billing.services import stripe_events, subscriptions
from config.http import JSON, refusal_response, speaks
from config.refusals import Refusal

# Plan changes and portal sessions call the payment provider: counted in their own window, so a
# burst of chat requests never blocks someone from upgrading.
SCOPE = "billing"


def _absolute(request: HttpRequest, name: str) -> str:
    return request.build_absolute_uri(reverse(name))


def _return_urls(request: HttpRequest) -> ReturnUrls:
    return ReturnUrls(
        success=_absolute(request, "billing:checkout_done"),
        cancel=_absolute(request, "billing:plans"),
        billing=_absolute(request, "billing:overview"),
    )


@require_GET
@login_required
def plans(request: HttpRequest) -> HttpResponse:
    billing = selectors.current_period(request.user)
    current, scheduled = billing.plan, selectors.scheduled_change(billing)
    rows = [
        {
            "plan": plan,
            "models": [m.name for m in selectors.plan_models(plan)],
            "context": selectors.context_words(plan),
            "cached_discount": pricing.cached_discount_percent(plan),
            "is_current": plan.pk == current.pk,
            "is_upgrade": selectors.is_upgrade(plan, current),
            "is_scheduled": scheduled is not None and scheduled.next_plan.pk == plan.pk,
        }
        for plan in selectors.public_plans()
    ]
    provider = get_provider()
    return render(
        request, "billing/plans.html", {"rows": rows, "current": current, "provider": provider, "scheduled": scheduled}
    )


@require_POST
@login_required
@rate_limited(SCOPE)
def choose_plan(request: HttpRequest, slug: str) -> HttpResponse:
    step = subscriptions.change_plan(request.user, slug, urls=_return_urls(request))
    if step.message:
        messages.success(request, step.message)
    return redirect(step.url)


@require_POST
@login_required
@rate_limited(SCOPE)
def keep_plan(request: HttpRequest) -> HttpResponse:
    """Undo a downgrade or cancellation waiting for the end of the period ("Keep my plan")."""
    step = subscriptions.keep_plan(request.user, urls=_return_urls(request))
    messages.success(request, step.message)
    return redirect(step.url)


@require_GET
@login_required
def checkout_done(request: HttpRequest) -> HttpResponse:
    # Stripe sends people here after its Checkout, before its webhook may have arrived; the plan changes
    # when it does. Nothing was paid with a provider that takes no payment, so nothing is said then.
    if not get_provider().takes_payment:
        return redirect("billing:overview")
    messages.success(
        request,
        _(
            "Thank you! Your payment went through. Your new plan starts as soon as Stripe confirms it, usually "
            "within a few seconds."
        ),
    )
    return redirect("billing:overview")


@require_GET
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    overview = selectors.billing_overview(request.user)
    context = {
        "overview": overview,
        "scheduled": overview.scheduled,
        "usage": selectors.usage_summary(request.user),
        "provider": get_provider(),
    }
    return render(request, "billing/overview.html", context)


@require_POST
@login_required
@rate_limited(SCOPE)
def portal(request: HttpRequest) -> HttpResponse:
    url = get_provider().portal_url(request.user, return_url=_absolute(request, "billing:overview"))
    if url is None:
        messages.info(request, _("There is nothing to manage yet: a payment method is added when you upgrade."))
        return redirect("billing:overview")
    return redirect(url)


@require_GET
@login_required
def usage(request: HttpRequest) -> HttpResponse:
    summary = selectors.usage_summary(request.user)
    scheduled = selectors.scheduled_change(summary.billing)
    days = selectors.daily_usage(request.user, days=30)
    chart = {
        "labels": [date_format(day, "M j") for day, _tokens in days],
        # The chart writes each day in the page's language from these (Intl.DateTimeFormat).
        "days": [day.isoformat() for day, _tokens in days],
        "tokens": [tokens for _day, tokens in days],
    }
    context = {
        "usage": summary,
        "scheduled": scheduled,
        "began": selectors.began_before_plan(summary.billing),
        "by_model": selectors.usage_by_model(request.user, summary.billing.period),
        "days": days,
        "chart": chart,
        "cached_discount": pricing.cached_discount_percent(summary.billing.plan),
    }
    return render(request, "billing/usage.html", context)


@csrf_exempt  # Stripe cannot send a CSRF token; the signature proves the sender instead.
@require_POST
@speaks(JSON)
def stripe_webhook(request: HttpRequest) -> HttpResponse:
    try:
        event = stripe_events.receive_webhook(request.body, request.headers.get("Stripe-Signature"))
    except Refusal as refusal:
        return refusal_response(request, refusal)
    return JsonResponse({"received": True, "handled": event is not None})


def landing(request: HttpRequest) -> HttpResponse:
    """`/` for people who are not signed in (chat.views.home): what the product is and costs."""
    plans = [
        {
            "plan": plan,
            "models": [model.name for model in selectors.plan_models(plan)],
            "context": selectors.context_words(plan),
        }
        for plan in selectors.public_plans()
    ]
    return render(request, "landing.html", {"plans": plans, "engine_simulated": settings.SGLANG_SIMULATED})

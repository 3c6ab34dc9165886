"""The process's own pages: liveness, and the answer to a request that failed Django's CSRF check."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.csrf import csrf_failure as django_csrf_failure

from config.http import refusal_response, wants_json
from config.refusals import NotAllowed


class CsrfFailed(NotAllowed):
    code = "csrf_failed"


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. No database or Redis work, and nothing about them: a load balancer
    or orchestrator restarting a process must not do it because something else is down (/readyz)."""
    return JsonResponse({"status": "ok"})


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """The JSON error for programs (they cannot read Django's HTML page); Django's own page for browsers."""
    if not wants_json(request):
        return django_csrf_failure(request, reason=reason)
    return refusal_response(
        request,
        CsrfFailed(
            "The request is missing its CSRF token: send the csrftoken cookie's value in an X-CSRFToken header."
        ),
    )

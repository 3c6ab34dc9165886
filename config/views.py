from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.csrf import csrf_failure as django_csrf_failure

from config import readiness
from config.metrics import staff_or_scraper

JSON_PATH_PREFIXES = ("/chat/api/",)


def wants_json(request: HttpRequest) -> bool:
    """A script's request to the chat's JSON endpoints (SSE streams included), or one asking for JSON."""
    return request.path.startswith(JSON_PATH_PREFIXES) or "json" in request.headers.get("Accept", "")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. No database or Redis work, and nothing about them: a load balancer
    or orchestrator restarting a process must not do it because something else is down (/readyz)."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when the database, Redis and an engine are up (config.readiness), else 503. Each
    check says only ok or not; what failed and why (hosts, errors, node names) only to staff or a
    request bearing METRICS_TOKEN."""
    checks = readiness.readiness()
    ready = all(check.status == readiness.OK for check in checks.values())
    body: dict = {"status": "ok" if ready else "unavailable", "checks": {name: c.status for name, c in checks.items()}}
    if staff_or_scraper(request):
        body["details"] = {name: check.detail for name, check in checks.items() if check.detail}
    response = JsonResponse(body, status=200 if ready else 503)
    response["Cache-Control"] = "no-store"
    return response


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """JSON for API clients (they cannot read Django's HTML page); the usual page for browsers."""
    if request.path.startswith(JSON_PATH_PREFIXES):
        return JsonResponse(
            {
                "error": {
                    "code": "csrf_failed",
                    "status": 403,
                    "message": "The request is missing its CSRF token: send the csrftoken cookie's value "
                    "in an X-CSRFToken header.",
                }
            },
            status=403,
        )
    return django_csrf_failure(request, reason=reason)

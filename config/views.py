from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.csrf import csrf_failure as django_csrf_failure

JSON_PATH_PREFIXES = ("/chat/api/",)


def wants_json(request: HttpRequest) -> bool:
    """A script's request to the chat's JSON endpoints (SSE streams included), or one asking for JSON."""
    return request.path.startswith(JSON_PATH_PREFIXES) or "json" in request.headers.get("Accept", "")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers: the process answers and the database is reachable."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database failure means "not healthy", whatever its type
        return JsonResponse({"status": "unhealthy", "database": str(exc)[:200]}, status=503)
    return JsonResponse({"status": "ok"})


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

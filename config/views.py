from django.db import connection
from django.http import HttpRequest, JsonResponse


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers: the process answers and the database is reachable."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database failure means "not healthy", whatever its type
        return JsonResponse({"status": "unhealthy", "database": str(exc)[:200]}, status=503)
    return JsonResponse({"status": "ok"})

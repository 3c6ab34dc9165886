"""`/readyz`: whether this process can serve people now (inference/readiness.py decides)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from config.metrics import staff_or_scraper
from inference import readiness


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when the database, Redis and an engine are up, else 503. Each check says only ok or
    not; what failed and why (hosts, errors, node names) only to staff or a request bearing METRICS_TOKEN."""
    checks = readiness.readiness()
    ready = all(check.status == readiness.OK for check in checks.values())
    body: dict = {"status": "ok" if ready else "unavailable", "checks": {name: c.status for name, c in checks.items()}}
    if staff_or_scraper(request):
        body["details"] = {name: check.detail for name, check in checks.items() if check.detail}
    response = JsonResponse(body, status=200 if ready else 503)
    response["Cache-Control"] = "no-store"
    return response

from django.http import JsonResponse

from console import selectors


def dashboard_data(request):
    """The dashboard's figures, for its charts to refresh (staff only: wrapped by the admin site)."""
    response = JsonResponse(selectors.dashboard())
    response["Cache-Control"] = "no-store"
    return response

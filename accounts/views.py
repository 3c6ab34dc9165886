from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def suspended_response(request: HttpRequest, user) -> HttpResponse:
    """Refuse a suspended user, and say why (403)."""
    if request.user.is_authenticated:
        logout(request)
    return render(
        request,
        "accounts/suspended.html",
        {"reason": user.suspended_reason, "suspended_at": user.suspended_at},
        status=403,
    )


@login_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html")

"""The user's side of a staff warning: dismissing it once read. Thin: moderation.services decides."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from moderation import services


@login_required
@require_POST
def warning_seen(request: HttpRequest, warning_id: int) -> HttpResponse:
    services.mark_warning_seen(request.user, warning_id)
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        back = "/"
    return redirect(back)

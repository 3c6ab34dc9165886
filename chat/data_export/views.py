"""The "Your data" page of the account area: what the export holds, the download, and deleting the
account (its second form). Thin: chat.data_export.services and accounts.services decide."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from accounts import services as accounts
from billing.http import client_ip
from billing.services import check_rate_limit
from chat.data_export import limit, services
from config.refusals import Refusal


@login_required
@require_http_methods(["GET", "POST"])
def your_data(request: HttpRequest) -> HttpResponse:
    """GET shows the page; POST (a form with the CSRF token, so no other site can spend the
    user's downloads) answers the .zip as an attachment."""
    refusal = None
    if request.method == "POST":
        try:
            export = services.export_my_data(request.user, site_url=request.build_absolute_uri("/"))
        except Refusal as refused:
            refusal = refused
        else:
            response = FileResponse(
                export.file, as_attachment=True, filename=export.filename, content_type="application/zip"
            )
            response["Content-Length"] = str(export.size)
            response["Cache-Control"] = "no-store"
            return response
    response = render(
        request,
        "chat/data_export.html",
        {"refusal": refusal, "allowance": limit.allowance()},
        status=refusal.status if refusal else 200,
    )
    if refusal is not None and refusal.retry_after is not None:
        response["Retry-After"] = str(refusal.retry_after)
    return response


@require_POST
@login_required
def delete_account(request: HttpRequest) -> HttpResponse:
    """Delete the signed-in user's account, confirmed with their password (the form is on "Your data").

    Attempts count against the plan's per-minute rate (their own window), so a session left open
    cannot be used to guess the password at speed.
    """
    try:
        check_rate_limit(user=request.user, ip=client_ip(request), scope="account-delete")
        accounts.delete_account(request.user, password=request.POST.get("password", ""))
    except Refusal as refusal:
        response = render(
            request,
            "chat/data_export.html",
            {"allowance": limit.allowance(), "delete_error": refusal},
            status=refusal.status,
        )
        if refusal.retry_after is not None:
            response["Retry-After"] = str(refusal.retry_after)
        return response
    logout(request)
    messages.success(
        request, "Your account was deleted. Your usage figures are kept without your name or email, for accounting."
    )
    return redirect("home")

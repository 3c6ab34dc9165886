"""The "Your data" page of the account area: what the export holds, the download, and deleting the
account (its second form). Thin: chat.data_export.services and accounts.services decide."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from accounts import services as accounts
from billing.services import check_rate_limit
from chat.data_export import limit, services
from config.http import client_ip, refusal_response
from config.refusals import Refusal

PAGE = "chat/data_export.html"


@login_required
@require_http_methods(["GET", "POST"])
def your_data(request: HttpRequest) -> HttpResponse:
    """GET shows the page; POST (a form with the CSRF token, so no other site can spend the
    user's downloads) answers the .zip as an attachment."""
    if request.method == "POST":
        try:
            export = services.export_my_data(request.user, site_url=request.build_absolute_uri("/"))
        except Refusal as refusal:
            return refusal_response(
                request, refusal, template=PAGE, context={"refusal": refusal, "allowance": limit.allowance()}
            )
        response = FileResponse(
            export.file, as_attachment=True, filename=export.filename, content_type="application/zip"
        )
        response["Content-Length"] = str(export.size)
        response["Cache-Control"] = "no-store"
        return response
    return render(request, PAGE, {"allowance": limit.allowance()})


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
        return refusal_response(
            request, refusal, template=PAGE, context={"allowance": limit.allowance(), "delete_error": refusal}
        )
    logout(request)
    messages.success(
        request, _("Your account was deleted. Your usage figures are kept without your name or email, for accounting.")
    )
    return redirect("home")

"""The "Your data" page of the account area: what the export holds, and the download. Thin."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

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

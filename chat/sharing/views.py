"""Pages of shared links: the public page anyone with a link reads, and the owner's list of links."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_safe

from chat.sharing import selectors, services
from chat.sharing.api import share_url
from config.refusals import BadInput, NotFound
from config.text import whole_number


@require_safe
def shared_conversation(request: HttpRequest, token: str) -> HttpResponse:
    """No sign-in. Unknown, revoked and taken-down links get the same 404, so none can be told apart."""
    try:
        page = selectors.shared_page(token)
    except NotFound as gone:
        response = render(request, "chat/shared_gone.html", {"message": gone.message}, status=404)
    else:
        response = render(request, "chat/shared.html", {"page": page, "engine_simulated": settings.SGLANG_SIMULATED})
    # Out of search engines; the link's token never leaves in a Referer; nothing keeps a copy
    # that would outlive a revocation.
    response["X-Robots-Tag"] = "noindex, nofollow"
    response["Referrer-Policy"] = "no-referrer"
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_http_methods(["GET", "POST"])
def shared_links(request: HttpRequest) -> HttpResponse:
    """The user's links: copy one, open its conversation, revoke it."""
    if request.method == "POST":
        revoked = services.revoke_share(request.user, _id(request.POST.get("revoke", "")))
        messages.success(
            request, _("Revoked the link to “%(title)s”. It no longer works.") % {"title": revoked.conversation}
        )
        return redirect("account_shared_links")
    links = [(share, share_url(request, share)) for share in selectors.shares_for(request.user)]
    return render(request, "chat/shared_links.html", {"links": links})


def _id(value: str) -> int:
    share_id = whole_number(value)
    if share_id is None:
        raise BadInput(_("That is not a shared link's id."))
    return share_id

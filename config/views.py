"""The process's own pages: liveness, the answer to a request that failed Django's CSRF check, and the
scripts' translations."""

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils import translation
from django.utils.translation import gettext as _
from django.views.csrf import csrf_failure as django_csrf_failure
from django.views.decorators.cache import cache_control
from django.views.i18n import JavaScriptCatalog

from config.http import refusal_response, wants_json
from config.refusals import NotAllowed


class CsrfFailed(NotAllowed):
    code = "csrf_failed"


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. No database or Redis work, and nothing about them: a load balancer
    or orchestrator restarting a process must not do it because something else is down (/readyz)."""
    return JsonResponse({"status": "ok"})


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """The JSON error for programs (they cannot read Django's HTML page); Django's own page for browsers."""
    if not wants_json(request):
        return django_csrf_failure(request, reason=reason)
    return refusal_response(
        request,
        CsrfFailed(
            _("The request is missing its CSRF token: send the csrftoken cookie's value in an X-CSRFToken header.")
        ),
    )


@cache_control(public=True, max_age=3600)
def javascript_catalog(request: HttpRequest, language: str) -> HttpResponse:
    """The chat's scripts' translations in `language` (djangojs.po), with Django's gettext, ngettext and
    interpolate. The language is in the URL (base.html asks for the page's own), so a shared cache can
    keep one copy per language."""
    if language not in dict(settings.LANGUAGES):
        raise Http404("No such language.")
    with translation.override(language):
        return JavaScriptCatalog.as_view(domain="djangojs")(request)

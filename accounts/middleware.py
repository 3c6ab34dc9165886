from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest
from django.shortcuts import redirect
from django.urls import reverse

from accounts.standing import account_refusal, two_factor_refusal
from accounts.views import suspended_response
from config.http import OPENAI, declared_form, refusal_response


class SuspendedUserMiddleware:
    """A user suspended while signed in is refused everything, with the reason, and stays signed in.

    Pages get the suspension page (with a sign-out button); the chat's JSON endpoints and its SSE
    streams get the JSON error. Signing out, static files and the site icon still work. The
    OpenAI-compatible API (`/v1/`) authenticates by key, not session, and asks the same question in
    its key check. The session is not ended here (a signed-out person would only be told "Sign in");
    it ends when the suspension is lifted (accounts.services.reinstate_user).
    """

    allowed_url_names = ("account_logout", "favicon")

    def __init__(self, get_response):
        self.get_response = get_response
        self._allowed_paths: set[str] | None = None

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            refusal = account_refusal(user)  # read from the user already loaded: no query
            if refusal is not None and not self._is_allowed(request.path):
                return suspended_response(request, user, refusal)
        return self.get_response(request)

    def _is_allowed(self, path: str) -> bool:
        # The API's endpoints (those that speak OpenAI's errors) authenticate by key, and ask there.
        if path.startswith("/" + settings.STATIC_URL.lstrip("/")) or declared_form(path) == OPENAI:
            return True
        if self._allowed_paths is None:
            self._allowed_paths = {reverse(name) for name in self.allowed_url_names}
        return path in self._allowed_paths


def is_page_request(request: HttpRequest) -> bool:
    """A browser opening a page, as opposed to fetching an image, a script's fetch() or an API call.

    Browsers say which with Sec-Fetch-Dest; without it, a request that accepts HTML (or says nothing
    of what it accepts) is taken for a page.
    """
    destination = request.headers.get("Sec-Fetch-Dest")
    if destination:
        return destination == "document"
    accept = request.headers.get("Accept", "")
    return not accept or "text/html" in accept


class StaffTwoFactorMiddleware:
    """Staff must enrol a TOTP authenticator before they can use anything else.

    Only a page is redirected to the enrolment page. Anything else (the icon the browser fetches
    beside every page, a script's request) gets a 403 saying why: sent to the enrolment page, such a
    request would be another visit to it, and each visit could replace the secret on screen.
    """

    # Pages a staff member needs while enrolling (and to leave), and the site icon.
    allowed_url_names = (
        "mfa_activate_totp",
        "mfa_index",
        "mfa_reauthenticate",
        "account_logout",
        "account_reauthenticate",
        "mfa_view_recovery_codes",
        "mfa_generate_recovery_codes",
        "mfa_download_recovery_codes",
        "favicon",
    )

    def __init__(self, get_response):
        self.get_response = get_response
        self._allowed_paths: set[str] | None = None

    def __call__(self, request):
        user = getattr(request, "user", None)
        refusal = None
        if user is not None and user.is_authenticated and user.is_staff and not self._is_allowed(request.path):
            refusal = two_factor_refusal(user)
        if refusal is not None:
            if is_page_request(request):
                messages.warning(request, "Staff accounts must set up two-factor authentication first.")
                return redirect("mfa_activate_totp")
            # The JSON error to a script, a bare page to anything else (nothing of the session read).
            return refusal_response(request, refusal, bare=True)
        return self.get_response(request)

    def _is_allowed(self, path: str) -> bool:
        if path.startswith("/" + settings.STATIC_URL.lstrip("/")):
            return True
        if self._allowed_paths is None:
            self._allowed_paths = {reverse(name) for name in self.allowed_url_names}
        return path in self._allowed_paths

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user
from django.http import HttpRequest
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _

from accounts import preferences
from accounts.standing import account_refusal, two_factor_refusal
from accounts.views import suspended_response
from config.http import OPENAI, declared_form, refusal_response
from config.on_the_loop import AsyncCapable


async def signed_in_user(request: HttpRequest):
    """The request's user, read once (the session, then the user, in one trip to a thread; no trip without
    a session cookie) and kept as request.user and request.auser(), so nothing on the event loop reads it
    again (request.user is lazy: read there, it would query the database from the loop)."""
    known = getattr(request, "_signed_in_user", None)
    if known is not None:
        return known
    if settings.SESSION_COOKIE_NAME in request.COOKIES:
        user = await sync_to_async(get_user)(request)
    else:
        user = get_user(request)  # an empty session, read from nothing (and marked read: Vary: Cookie)

    async def auser():
        return request.user  # as a view's login() or logout() leaves it

    request.user, request.auser, request._signed_in_user = user, auser, user
    return user


class UserLanguageMiddleware(AsyncCapable):
    """A signed-in person's own language (Settings) over the browser's: the pages, the sentences and the
    chat's scripts, on every device they sign in on."""

    def sync_call(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            use_language(request, user)
        return self.get_response(request)

    async def __acall__(self, request):
        user = await signed_in_user(request)
        if user.is_authenticated:
            use_language(request, user)
        return await self.get_response(request)


def use_language(request: HttpRequest, user) -> None:
    language = preferences.language_of(user, request)
    if language != request.LANGUAGE_CODE:
        translation.activate(language)
        request.LANGUAGE_CODE = translation.get_language()


class SuspendedUserMiddleware(AsyncCapable):
    """A user suspended while signed in is refused everything, with the reason, and stays signed in.

    Pages get the suspension page (with a sign-out button); the chat's JSON endpoints and its SSE
    streams get the JSON error. Signing out, static files and the site icon still work. The
    OpenAI-compatible API (`/v1/`) authenticates by key, not session, and asks the same question in
    its key check. The session is not ended here (a signed-out person would only be told "Sign in");
    it ends when the suspension is lifted (accounts.services.reinstate_user).
    """

    allowed_url_names = ("account_logout", "favicon")
    _allowed_paths: set[str] | None = None

    def sync_call(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            refusal = account_refusal(user)  # read from the user already loaded: no query
            if refusal is not None and not self._is_allowed(request.path):
                return suspended_response(request, user, refusal)
        return self.get_response(request)

    async def __acall__(self, request):
        user = await signed_in_user(request)
        if user.is_authenticated:
            refusal = account_refusal(user)
            if refusal is not None and not self._is_allowed(request.path):
                return await sync_to_async(suspended_response)(request, user, refusal)  # a page: templates
        return await self.get_response(request)

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


class StaffTwoFactorMiddleware(AsyncCapable):
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
    _allowed_paths: set[str] | None = None

    def sync_call(self, request):
        user = getattr(request, "user", None)
        refusal = None
        if user is not None and user.is_authenticated and user.is_staff and not self._is_allowed(request.path):
            refusal = two_factor_refusal(user)
        return self._refused(request, refusal) if refusal is not None else self.get_response(request)

    async def __acall__(self, request):
        user = await signed_in_user(request)
        refusal = None
        if user.is_authenticated and user.is_staff and not self._is_allowed(request.path):
            refusal = await sync_to_async(two_factor_refusal)(user)  # reads the authenticators
        return self._refused(request, refusal) if refusal is not None else await self.get_response(request)

    def _refused(self, request, refusal):
        if is_page_request(request):
            messages.warning(request, _("Staff accounts must set up two-factor authentication first."))
            return redirect("mfa_activate_totp")
        # The JSON error to a script, a bare page to anything else (nothing of the session read).
        return refusal_response(request, refusal, bare=True)

    def _is_allowed(self, path: str) -> bool:
        if path.startswith("/" + settings.STATIC_URL.lstrip("/")):
            return True
        if self._allowed_paths is None:
            self._allowed_paths = {reverse(name) for name in self.allowed_url_names}
        return path in self._allowed_paths

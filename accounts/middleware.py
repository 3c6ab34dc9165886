from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse

from accounts.selectors import has_totp
from accounts.views import suspended_response


class SuspendedUserMiddleware:
    """End the session of a user who was suspended after signing in."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and user.is_suspended:
            return suspended_response(request, user)
        return self.get_response(request)


class StaffTwoFactorMiddleware:
    """Staff must enrol a TOTP authenticator before they can use anything else."""

    # Pages a staff member needs while enrolling (and to leave).
    allowed_url_names = (
        "mfa_activate_totp", "mfa_index", "mfa_reauthenticate", "account_logout",
        "account_reauthenticate", "mfa_view_recovery_codes", "mfa_generate_recovery_codes",
        "mfa_download_recovery_codes",
    )

    def __init__(self, get_response):
        self.get_response = get_response
        self._allowed_paths: set[str] | None = None

    def __call__(self, request):
        user = getattr(request, "user", None)
        if (
            settings.MFA_REQUIRED_FOR_STAFF
            and user is not None
            and user.is_authenticated
            and user.is_staff
            and not self._is_allowed(request.path)
            and not has_totp(user)
        ):
            messages.warning(request, "Staff accounts must set up two-factor authentication first.")
            return redirect("mfa_activate_totp")
        return self.get_response(request)

    def _is_allowed(self, path: str) -> bool:
        if path.startswith("/" + settings.STATIC_URL.lstrip("/")):
            return True
        if self._allowed_paths is None:
            self._allowed_paths = {reverse(name) for name in self.allowed_url_names}
        return path in self._allowed_paths

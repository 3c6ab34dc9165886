"""Forms that change allauth's behaviour (registered through settings.MFA_FORMS)."""

from allauth.core import context
from allauth.mfa.totp.forms import ActivateTOTPForm
from allauth.mfa.totp.internal.auth import SECRET_SESSION_KEY


class StableSecretActivateTOTPForm(ActivateTOTPForm):
    """The authenticator setup form, keeping the secret it has shown until it is activated.

    allauth draws a new secret each time the page is fetched, so a second tab, a reload after scanning
    the QR code, or any stray request for the page would leave the code on screen stale and every
    correct code "incorrect". The pending secret lives in the session and is cleared on activation.
    """

    def __init__(self, *args, **kwargs) -> None:
        session = context.request.session
        shown = session.get(SECRET_SESSION_KEY)
        super().__init__(*args, **kwargs)
        if shown and self.secret != shown:
            self.secret = session[SECRET_SESSION_KEY] = shown

"""Forms that change allauth's behaviour (registered through settings.MFA_FORMS)."""

from allauth.core import context
from allauth.mfa.totp.forms import ActivateTOTPForm
from allauth.mfa.totp.internal.auth import SECRET_SESSION_KEY

from accounts import two_factor


class StableSecretActivateTOTPForm(ActivateTOTPForm):
    """The authenticator setup form, keeping the secret it has shown until it is activated.

    allauth draws a new secret each time the page is fetched and keeps it in the session, so a second
    tab, a reload after scanning the QR code, a stray request for the page, or signing in again before
    activating would leave the code on screen stale and every correct code "incorrect". The pending
    secret belongs to the account instead (accounts.two_factor), and activation deletes it.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.is_bound:
            # A code is checked against the secret shown; a post that never saw one keeps allauth's.
            secret = two_factor.pending_totp_secret(self.user) or self.secret
        else:
            secret = two_factor.keep_pending_totp_secret(self.user, self.secret)
        # allauth's session copy follows, so anything of allauth's that reads it agrees.
        self.secret = context.request.session[SECRET_SESSION_KEY] = secret

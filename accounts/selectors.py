"""Reads about accounts."""

import time

from allauth.account import app_settings as allauth_account_settings
from allauth.account.authentication import get_authentication_records
from allauth.mfa.models import Authenticator
from django.http import HttpRequest
from django.utils.translation import gettext as _

from accounts.models import ApiKey, User
from config.refusals import NotFound

# Sign-in steps that prove what allauth's "Confirm access" page would ask for again.
CONFIRMING_METHODS = frozenset({"password", "mfa"})


def has_totp(user: User) -> bool:
    return Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).exists()


def signed_in_recently(request: HttpRequest) -> bool:
    """Whether the person typed their password (or a code) in this session within the
    reauthentication window (ACCOUNT_REAUTHENTICATION_TIMEOUT, five minutes).

    allauth counts only its own "Confirm access" step; a sign-in moments ago proves the same thing,
    so asking for the password again right after it only gets in the way.
    """
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return False
    times = [
        record.get("at", 0)
        for record in get_authentication_records(request, user)
        if record.get("method") in CONFIRMING_METHODS
    ]
    return bool(times) and time.time() - max(times) < allauth_account_settings.REAUTHENTICATION_TIMEOUT


def api_keys_for(user: User):
    """The user's API keys, newest first, revoked and expired ones too."""
    return ApiKey.objects.filter(user=user).order_by("-created")


def api_key_of(user: User, key_id: int) -> ApiKey:
    """One of the user's API keys (revoked or not); NotFound for anyone else's or none, alike."""
    key = api_keys_for(user).filter(pk=key_id).first()
    if key is None:
        raise NotFound(_("There is no such API key."))
    return key

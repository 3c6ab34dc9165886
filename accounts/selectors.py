"""Reads about accounts."""

from allauth.mfa.models import Authenticator

from accounts.models import User


def has_totp(user: User) -> bool:
    return Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).exists()

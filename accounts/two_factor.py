"""The TOTP secret a staff member is enrolling: one per account, from the first time the setup page shows
it until it is activated, whichever session (browser, sign-in) shows it or activates it."""

from __future__ import annotations

from allauth.mfa.models import Authenticator
from allauth.mfa.utils import decrypt, encrypt
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from accounts.models import PendingTotpSecret, User


def pending_totp_secret(user: User) -> str | None:
    """The secret shown to the user and not yet activated, if any."""
    row = PendingTotpSecret.objects.filter(user=user).first()
    return decrypt(row.secret) if row is not None else None


def keep_pending_totp_secret(user: User, drawn: str) -> str:
    """The secret the setup page shows: the one shown before (in any session) until it is activated; else
    `drawn`, kept from now on. Two pages drawing at once agree on one (the row is unique per user)."""
    row, _ = PendingTotpSecret.objects.get_or_create(user=user, defaults={"secret": encrypt(drawn)})
    return decrypt(row.secret)


@receiver(post_save, sender=Authenticator, dispatch_uid="accounts.two_factor.activated")
@receiver(post_delete, sender=Authenticator, dispatch_uid="accounts.two_factor.removed")
def forget_pending_totp_secret(sender, instance: Authenticator, **kwargs) -> None:
    """Activated (in the same transaction), the secret is no longer pending; removed, the next setup must
    draw a new one rather than show the old authenticator's again."""
    if instance.type == Authenticator.Type.TOTP:
        PendingTotpSecret.objects.filter(user_id=instance.user_id).delete()

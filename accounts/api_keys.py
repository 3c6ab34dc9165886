"""API keys: made, revoked, and checked on every API request.

A key is 32 random bytes (URL-safe base64) behind a fixed prefix, so a leaked key is easy to
recognise in logs and scanners. Keys carry that much entropy, so a single SHA-256 is a sound way to
store them (slow password hashes are for guessable secrets) and lets the check be one indexed
lookup.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import ApiKey, User
from accounts.standing import check_account
from config.refusals import BadInput, NotAllowed, NotFound, Unauthenticated

KEY_PREFIX = "sk-sgl-"
SHOWN_PREFIX_LENGTH = len(KEY_PREFIX) + 6
# last_used is a hint for people, not an audit log: write it at most this often per key.
LAST_USED_GRANULARITY = timedelta(minutes=1)
#: The keys made in this long are counted against twice the plan's active keys.
KEYS_MADE_WINDOW = timedelta(days=1)


def _hash(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


#: The longest a key can be made to last, in days (the API keys page offers any number up to it, or none).
LONGEST_EXPIRY_DAYS = 3650


def expiry_after(days: int | None) -> datetime | None:
    """When a key made now for `days` days expires (None: it never does); refused outside 1 to 3650."""
    if days is None:
        return None
    if not 1 <= days <= LONGEST_EXPIRY_DAYS:
        raise BadInput(_("Choose an expiry between 1 and %(most)s days, or none.") % {"most": LONGEST_EXPIRY_DAYS})
    return timezone.now() + timedelta(days=days)


def create_api_key(user: User, name: str, *, expires_at: datetime | None = None) -> tuple[ApiKey, str]:
    """A new key for `user`; returns the row and the key itself, which is never shown again.

    Within the plan's API keys (billing decides: active keys at most, and twice that many made a day)."""
    from billing.services import check_api_key_allowance, effective_plan

    plan = effective_plan(user)
    if not plan.allows_api_keys:
        raise NotAllowed(
            _("API keys are not included in the %(plan)s plan. Upgrade to a plan that includes them.")
            % {"plan": plan.name}
        )
    name = " ".join(str(name or "").split())[:100]
    if not name:
        raise BadInput(_("Give the key a name, so you can tell it apart later."))
    if expires_at is not None and expires_at <= timezone.now():
        raise BadInput(_("The expiry date must be in the future."))
    raw = KEY_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        # One key at a time per person: the counts stay true until the new key is saved, so two tabs
        # cannot both take the last place.
        User.objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True).first()
        now = timezone.now()
        keys = ApiKey.objects.filter(user=user)
        check_api_key_allowance(
            plan,
            active=keys.filter(revoked_at__isnull=True).exclude(expires_at__lte=now).count(),
            made=list(keys.filter(created__gt=now - KEYS_MADE_WINDOW).values_list("created", flat=True)),
            now=now,
        )
        key = ApiKey.objects.create(
            user=user, name=name, prefix=raw[:SHOWN_PREFIX_LENGTH], hashed_key=_hash(raw), expires_at=expires_at
        )
    return key, raw


def revoke_api_key(user: User, key_id: int) -> ApiKey:
    key = ApiKey.objects.filter(pk=key_id, user=user).first()
    if key is None:
        raise NotFound(_("There is no such API key."))
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


def usable_api_key(raw_key: str | None) -> ApiKey | None:
    """The key (with its user) behind a raw key if it is neither revoked nor expired; reads only, and
    decides nothing about the request (that is `authenticate_api_key`'s): for what a response states."""
    if not raw_key:
        return None
    key = ApiKey.objects.select_related("user").filter(hashed_key=_hash(raw_key), revoked_at__isnull=True).first()
    if key is None or (key.expires_at is not None and key.expires_at <= timezone.now()):
        return None
    return key


def authenticate_api_key(raw_key: str | None) -> ApiKey:
    """The key behind an `Authorization: Bearer …` value, or Unauthenticated (401)."""
    if not raw_key:
        raise Unauthenticated("No API key was sent. Send it as 'Authorization: Bearer <key>'.")
    key = ApiKey.objects.select_related("user").filter(hashed_key=_hash(raw_key)).first()
    if key is None:
        raise Unauthenticated("The API key is not valid.")
    if key.revoked_at is not None:
        raise Unauthenticated("This API key was revoked.")
    if key.expires_at is not None and key.expires_at <= timezone.now():
        raise Unauthenticated("This API key has expired.")
    check_account(key.user)
    now = timezone.now()
    if key.last_used is None or now - key.last_used > LAST_USED_GRANULARITY:
        ApiKey.objects.filter(pk=key.pk).update(last_used=now)
        key.last_used = now
    return key

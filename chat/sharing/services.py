"""Writes for shared links. Every rule about who may share what, and how, is decided here."""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import User
from accounts.standing import check_account
from billing import services as billing
from chat import selectors as chat_selectors
from chat.models import Conversation, SharedConversation
from chat.sharing import selectors
from config.refusals import BadInput, NotAllowed, NotFound

#: Random bytes in a token: 192 bits, far beyond guessing (32 URL-safe characters).
TOKEN_BYTES = 24
TAKEDOWN_REASON_MAX = 500


def share_conversation(
    user: User,
    conversation_id: int,
    *,
    mode: object = SharedConversation.Mode.SNAPSHOT,
    show_owner_name: object = False,
    show_passages: object = False,
    leaf_id: int | None = None,
) -> tuple[SharedConversation, bool]:
    """Make the conversation's link, or update the one it has; returns (link, created).

    A snapshot shares the branch that ends at `leaf_id` (the one on the owner's screen; by default
    the conversation's current branch) as it is now; sharing again re-takes the snapshot under the
    same link. A live link follows the conversation's current branch.
    """
    check_account(user)
    if mode not in SharedConversation.Mode.values:
        raise BadInput("mode must be snapshot or live.")
    if not isinstance(show_owner_name, bool):
        raise BadInput("show_owner_name must be true or false.")
    if not isinstance(show_passages, bool):
        raise BadInput("show_passages must be true or false.")
    with transaction.atomic():
        # Locking the conversation serialises two shares of it (two tabs): one link, not two.
        conversation = Conversation.objects.select_for_update().filter(pk=conversation_id, owner=user).first()
        if conversation is None:
            raise NotFound(_("There is no such conversation."))
        removed = selectors.taken_down_share(conversation)
        if removed is not None:
            raise NotAllowed(
                _("Staff took down this conversation's shared link (%(reason)s), so it cannot be shared again.")
                % {"reason": removed.takedown_reason}
            )
        branch = chat_selectors.branch(conversation, leaf_id)
        if not branch:
            raise BadInput(_("There is nothing to share yet: this conversation has no messages."))
        share = selectors.active_share(conversation)
        created = share is None
        if created:
            # A new row (updating a working link makes none): revoking and sharing again had no end.
            billing.count_new_shared_link(user, billing.current_period(user).plan)
            share = SharedConversation(conversation=conversation, token=secrets.token_urlsafe(TOKEN_BYTES))
        share.mode = mode
        share.show_owner_name = show_owner_name
        share.show_passages = show_passages
        share.message_ids = [m.pk for m in branch] if mode == SharedConversation.Mode.SNAPSHOT else []
        share.save()
    return share, created


def revoke_share(user: User, share_id: int) -> SharedConversation:
    """The link stops working at once, for good (sharing again makes a new link)."""
    share = SharedConversation.objects.filter(pk=share_id, conversation__owner=user).first()
    if share is None:
        raise NotFound(_("There is no such shared link."))
    _revoke(share)
    return share


def revoke_conversation_share(user: User, conversation_id: int) -> SharedConversation | None:
    """Revoke the conversation's working link, if it has one."""
    conversation = chat_selectors.get_conversation(user, conversation_id)
    share = selectors.active_share(conversation)
    if share is not None:
        _revoke(share)
    return share


def _revoke(share: SharedConversation) -> None:
    if share.revoked_at is None:
        share.revoked_at = timezone.now()
        share.save(update_fields=["revoked_at", "updated"])


def take_down(staff: User, shares: Iterable[SharedConversation], reason: str) -> int:
    """Staff remove links (abuse, a complaint); the owner sees the reason and cannot share that
    conversation again. Returns how many were taken down now (ones already down are left as they were)."""
    if not (staff.is_active and staff.is_staff):
        raise NotAllowed("Only staff can take a shared link down.")
    reason = " ".join(str(reason or "").split())
    if not reason:
        raise BadInput("Give a reason: the owner of the link is shown it.")
    if len(reason) > TAKEDOWN_REASON_MAX:
        raise BadInput(f"Keep the reason under {TAKEDOWN_REASON_MAX} characters.")
    ids = [share.pk for share in shares]
    return SharedConversation.objects.filter(pk__in=ids, taken_down_at__isnull=True).update(
        taken_down_at=timezone.now(),
        taken_down_by=staff,
        takedown_reason=reason,
        updated=timezone.now(),
    )

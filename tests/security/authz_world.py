"""The people and things the security tests act on: an owner with one of everything, and the others.

Actors, in the order the matrix tests use them (the owner last, so that what the owner deletes is
still there for the others' attempts):

- `anonymous`: nobody signed in;
- `other`: another signed-in user, with nothing of their own;
- `moderator`: staff in the `moderator` group, with a TOTP authenticator (staff must have one);
- `staff`: a superuser, with a TOTP authenticator;
- `owner`: the user who owns every object below (on the Plus plan, so API keys are allowed).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pytest
from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.core.files.base import ContentFile
from django.test import Client

from accounts.api_keys import create_api_key
from accounts.models import User
from chat.models import AnswerFeedback, Conversation, Message, SharedConversation
from console.roles import MODERATOR_GROUP
from documents.models import Chunk, Document
from evals.models import EvalSet
from moderation.models import AccountWarning, Flag
from tests.chat.factories import conversation_for, exchange
from tests.conftest import PASSWORD, make_user
from tests.support.images import png
from tests.support.plans import put_on_plan

ACTORS = ("anonymous", "other", "moderator", "staff", "owner")


@dataclass
class World:
    owner: object
    other: object
    moderator: object
    staff: object
    conversation: Conversation
    question: Message
    answer: Message
    share: SharedConversation
    api_key: str
    api_key_id: int
    flag: Flag
    warning: AccountWarning
    feedback: AnswerFeedback
    document: Document
    chunk: Chunk
    picture: Document
    users: dict = field(default_factory=dict)

    def client(self, actor: str, **kwargs) -> Client:
        client = Client(**kwargs)
        if actor != "anonymous":
            client.force_login(self.users[actor])
        return client


@functools.cache
def _hashed_password() -> str:
    return make_password(PASSWORD)


def make_person(email: str, **fields):
    """A verified user whose password is PASSWORD, hashed once per run (hashing is slow on purpose)."""
    person = make_user(email, password=None, **fields)
    User.objects.filter(pk=person.pk).update(password=_hashed_password())
    person.password = _hashed_password()
    return person


def make_staff(email: str, **fields):
    staff = make_person(email, staff=True, **fields)
    TOTP.activate(staff, generate_totp_secret())
    return staff


def build_world() -> World:
    owner = make_person("owner@example.com", display_name="Owner")
    put_on_plan(owner, "plus")
    other = make_person("other@example.com")
    moderator = make_staff("moderator@example.com")
    moderator.groups.add(Group.objects.get(name=MODERATOR_GROUP))
    staff = make_staff("root@example.com", is_superuser=True)

    conversation = conversation_for(owner, title="Owner's private chat")
    question, answer = exchange(conversation, "What is private?", "This conversation is.")
    share = SharedConversation.objects.create(
        conversation=conversation, token="owner-share-token-" + "x" * 20, message_ids=[question.pk, answer.pk]
    )
    key, raw = create_api_key(owner, "laptop")
    flag = Flag.objects.create(
        message=answer, user=owner, reporter=owner, source=Flag.Source.USER_REPORT, text=answer.content, reason="odd"
    )
    warning = AccountWarning.objects.create(user=owner, flag=flag, text="Please keep it civil.", issued_by=staff)
    feedback = AnswerFeedback.objects.create(user=owner, message=answer, rating="up")
    document = Document.objects.create(
        owner=owner, conversation=conversation, name="private.pdf", file="documents/private.pdf", state="ready"
    )
    chunk = Chunk.objects.create(document=document, owner=owner, ordinal=0, page=1, text="Private passage.")
    picture = Document(
        owner=owner,
        conversation=conversation,
        name="private.png",
        kind="image",
        state="ready",
        content_type="image/png",
    )
    picture.file.save("private.png", ContentFile(png(2, 2)))
    EvalSet.objects.create(name="Harbour facts", created_by=staff)  # staff's: the console's evaluation pages
    return World(
        owner=owner,
        other=other,
        moderator=moderator,
        staff=staff,
        conversation=conversation,
        question=question,
        answer=answer,
        share=share,
        api_key=raw,
        api_key_id=key.pk,
        flag=flag,
        warning=warning,
        feedback=feedback,
        document=document,
        chunk=chunk,
        picture=picture,
        users={"owner": owner, "other": other, "moderator": moderator, "staff": staff},
    )


@pytest.fixture
def world(db) -> World:
    return build_world()

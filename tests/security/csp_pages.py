"""Every page of the product, read from the URL conf, with its parameters filled from a small world of
real objects, for the Content-Security-Policy tests (test_csp_headers.py, test_csp_browser.py).

A route added to any urls.py or to the admin is in `every_path()` at once, so it is checked for the
policy without anyone remembering to list it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.apps import apps
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.urls import URLPattern, URLResolver, get_resolver

from accounts.models import ApiKey, User
from billing.models import Plan
from billing.seed import seed_plans
from chat.models import AnswerFeedback, Conversation, Message, SharedConversation
from chat.sharing.services import share_conversation
from evals.models import EvalItem, EvalResult, EvalRun, EvalSet, Rollout
from moderation.models import AccountWarning, Flag
from tests.conftest import make_user
from tests.support.accounts import make_staff

#: Routes that are not pages for a browser: they stream (the SSE route is served by a Channels consumer
#: beside Django in production, config/asgi.py), or only redirect to a download.
NOT_PAGES = ("/chat/api/messages/<int:message_id>/stream",)

_PARAM = re.compile(r"<(?:(\w+):)?(\w+)>|\(\?P<(\w+)>[^)]*\)")


def routes() -> list[str]:
    """Every URL pattern Django resolves (the admin's included), prefixes joined, as written."""
    found: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                found.append(prefix + str(entry.pattern))

    walk(get_resolver().url_patterns, "/")
    return found


@dataclass
class World:
    member: User
    staff: User
    conversation: Conversation
    question: Message
    answer: Message
    share: SharedConversation
    warning: AccountWarning
    flag: Flag
    api_key: ApiKey

    def fill(self, route: str) -> str:
        """The route with each parameter replaced by a real object's id (a page, not a 404, where possible)."""
        model = _admin_model(route)

        def value(match: re.Match) -> str:
            name = match.group(2) or match.group(3)
            if name == "object_id":
                if model is not None:
                    first = model._default_manager.order_by("pk").first()
                    return str(first.pk) if first else "1"
                return str(self.member.pk)
            if name == "app_label":
                return "chat"
            return {
                "conversation_id": str(self.conversation.pk),
                "message_id": str(self.answer.pk),
                "token": self.share.token,
                "warning_id": str(self.warning.pk),
                "flag_id": str(self.flag.pk),
                "key_id": str(self.api_key.pk),
                "user_id": str(self.member.pk),
                "id": str(self.member.pk),
                "slug": "plus",
                "action": "hide",
                "model_id": "sim-small",
                "language": "fr",
                "content_type_id": str(ContentType.objects.get_for_model(Conversation).pk),
                "provider_id": "sso",
                "key": "not-a-real-key",
                "uidb36": "zz",
                "set_id": str(EvalSet.objects.order_by("pk").first().pk),
                "url": "no/such/page/",
            }.get(name, "1")

        path = _PARAM.sub(value, route)
        return path.replace("^", "").replace("$", "").replace("\\", "")


def _admin_model(route: str):
    """The model of an /admin/<app>/<model>/... route, when it has one."""
    parts = route.split("/")
    if len(parts) > 3 and parts[1] == "admin":
        try:
            model = apps.get_model(parts[2], parts[3])
        except (LookupError, ValueError):
            return None
        return model if admin.site.is_registered(model) else None
    return None


def build_world() -> World:
    """A member with a conversation, a shared link, a warning, a flag, feedback and an API key; a
    superuser with an authenticator (the console refuses staff without one)."""
    seed_plans(Plan)
    member = make_user("member@example.com", display_name="Member")
    staff = make_staff("root@example.com", is_superuser=True, display_name="Root")
    conversation = Conversation.objects.create(owner=member, model="sim-small", title="A conversation")
    question = Message.objects.create(conversation=conversation, role=Message.Role.USER, content="Hello **there**")
    answer = Message.objects.create(
        conversation=conversation, role=Message.Role.ASSISTANT, parent=question, content="Hi, *you*."
    )
    share, _ = share_conversation(member, conversation.pk, show_owner_name=True)
    warning = AccountWarning.objects.create(user=member, text="Please keep it civil.", issued_by=staff)
    flag = Flag.objects.create(user=member, message=answer, source="user_report", reporter=member, reason="rude")
    AnswerFeedback.objects.create(message=answer, user=member, rating="up", comment="Good")
    # Written directly: the member's Free plan makes none (the page asking before revoking it is the point).
    api_key = ApiKey.objects.create(user=member, name="laptop", prefix="sk-sgl-abcdef", hashed_key="0" * 64)
    eval_set = EvalSet.objects.create(name="Harbour facts", created_by=staff)
    item = EvalItem.objects.create(eval_set=eval_set, prompt="What is 2 + 2?", scorer="exact", reference="4")
    evaluation = EvalRun.objects.create(eval_set=eval_set, model="sim-small", items_total=1, items_done=1)
    EvalResult.objects.create(run=evaluation, item=item, answer="4", score=1.0, passed=True, detail="Exact.")
    Rollout.objects.create(
        model="sim-small", from_group="blue", to_group="green", steps=[1, 100], status="rolled_back", reason="Slow."
    )
    return World(member, staff, conversation, question, answer, share, warning, flag, api_key)


def every_path(world: World) -> list[str]:
    return sorted({world.fill(route) for route in routes() if route not in NOT_PAGES})

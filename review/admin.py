"""The moderation queue (plain Django admin): the flags, to filter and decide. The queue's actions
(dismiss, uphold, uphold and hide the message, warn, suspend for a period, ban) are each a
`review.services` call, from the list (bulk) or from a flag's page (the buttons at the top); all but
dismiss and uphold ask first, on one page. The admin URLs stay the flag's own (`moderation/flag/`):
the model is moderation's, its review is here."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Case, IntegerField, Value, When
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from accounts import services as accounts
from audit.services import record
from config.refusals import Refusal
from config.text import whole_number
from moderation.models import AccountWarning, Flag
from review import selectors, services

#: The queue's actions that ask first: what the page says, and what it asks for.
QUEUE_ACTIONS = {
    "hide": {
        "title": "Uphold and hide the messages",
        "verb": "Hide",
        "explanation": "Each flag is upheld and its message disappears from its owner's chat, exports and shared "
        "pages, and from what later turns send to the model. The text stays on the flag, for staff.",
        "label": "Notes (for staff, optional)",
        "needs_text": False,
        "danger": False,
        "done": "Hid {count} message{s}.",
    },
    "warn": {
        "title": "Warn users",
        "verb": "Warn",
        "explanation": "Each user gets this warning on their chat page until they dismiss it, and by email. "
        "Their flags here are upheld.",
        "label": "Warning (shown to each user, word for word)",
        "needs_text": True,
        "danger": False,
        "done": "Warned {count} user{s}.",
    },
    "suspend": {
        "title": "Suspend users for a period",
        "verb": "Suspend",
        "explanation": "Each user is refused everything at once (open chats close, running answers stop, API keys "
        "are refused) until the period ends; then they can sign in again. Their flags here are upheld.",
        "label": "Reason (shown to each user, word for word)",
        "needs_text": True,
        "danger": True,
        "done": "Suspended {count} user{s}.",
    },
    "ban": {
        "title": "Ban users",
        "verb": "Ban",
        "explanation": "Each user is suspended for good: their API keys are revoked and a paid subscription is "
        "cancelled at once. Only a superuser can lift a ban. Their flags here are upheld.",
        "label": "Reason (shown to each user, word for word)",
        "needs_text": True,
        "danger": True,
        "done": "Banned {count} user{s}.",
    },
}
#: The periods a suspension from the queue can last (days; None: until staff lift it).
SUSPENSION_DAYS = ((1, "1 day"), (3, "3 days"), (7, "7 days"), (30, "30 days"), (None, "Until staff lift it"))
DEFAULT_WARNING = (
    "Something you wrote broke our content policy{category}. Please keep to it: if it happens again, your account "
    "may be suspended."
)


@admin.register(Flag)
class FlagAdmin(admin.ModelAdmin):
    list_display = ("created", "state", "source", "category", "score", "blocked", "user", "excerpt", "reviewer")
    list_display_links = ("created", "state")
    list_filter = ("state", "source", "blocked", "category", ("created", admin.DateFieldListFilter))
    list_select_related = ("user", "reviewer")
    search_fields = ("user__email", "category", "text", "reason", "=message__id")
    search_help_text = "Search the user's email, the category, the text, or an answer's id."
    date_hierarchy = "created"
    fields = (
        "state",
        "notes",
        "source",
        "category",
        "score",
        "backend",
        "blocked",
        "user",
        "reporter",
        "message_link",
        "reason",
        "text",
        "conversation",
        "reviewer",
        "reviewed_at",
        "created",
    )
    # What staff edit on a flag's page is its state and notes; everything else there is the record.
    readonly_fields = tuple(field for field in fields if field not in ("state", "notes"))
    actions = ("uphold", "dismiss", "hide", "warn", "suspend", "ban")
    change_form_template = "admin/moderation/flag/change_form.html"

    def get_queryset(self, request):
        # Open flags first, newest first within each.
        is_open = Case(When(state=Flag.State.OPEN, then=Value(0)), default=Value(1), output_field=IntegerField())
        return super().get_queryset(request).order_by(is_open, "-created")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        # Superusers only (review.services decides): a flag is the only copy of what was blocked.
        return services.may_delete_flags(request.user) and super().has_delete_permission(request, obj)

    def delete_model(self, request, obj: Flag):
        services.delete_flags(request.user, [obj])

    def delete_queryset(self, request, queryset):
        services.delete_flags(request.user, list(queryset.select_related("user")))

    @admin.display(description="text")
    def excerpt(self, flag: Flag) -> str:
        return Truncator(" ".join(flag.text.split())).chars(80)

    @admin.display(description="message")
    def message_link(self, flag: Flag) -> str:
        if flag.message_id is None:
            return "—"
        return format_html("#{} in conversation #{}", flag.message_id, flag.message.conversation_id)

    @admin.display(description="conversation around it")
    def conversation(self, flag: Flag) -> str:
        """The turns just before and after the flagged message (staff read a conversation only through a
        flag, or with a recorded reason; opening a flag is audited: see change_view)."""
        turns = selectors.turns_around(flag)
        if not turns:
            return "—"
        return format_html_join(
            "",
            '<p class="flag-turn{}"><strong>{}</strong> {}</p>',
            (
                (
                    " flag-turn--flagged" if m.pk == flag.message_id else "",
                    m.role,
                    Truncator(m.content or f"({m.status})").chars(600),
                )
                for m in turns
            ),
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        response = super().change_view(request, object_id, form_url, extra_context)
        if request.method == "GET" and response.status_code == 200:
            flag = self.get_object(request, object_id)
            if flag is not None and flag.message_id is not None:
                record(request.user, "flag.view", flag, details={"message_id": flag.message_id})
        return response

    def save_model(self, request, obj: Flag, form, change):
        """A state chosen on the form goes through the same service as the actions."""
        if change and "state" in form.changed_data and obj.state != Flag.State.OPEN:
            services.review_flag(obj, request.user, obj.state, obj.notes)
        else:
            super().save_model(request, obj, form, change)

    def _review(self, request, queryset, state: str, verb: str) -> None:
        flags = list(queryset.select_related("user"))
        for flag in flags:
            services.review_flag(flag, request.user, state)
        suspended = {f.user.email for f in flags if f.user is not None and f.user.is_suspended}
        self.message_user(request, f"{verb} {len(flags)} flag{'s' if len(flags) != 1 else ''}.", messages.SUCCESS)
        if suspended and state == Flag.State.UPHELD:
            self.message_user(request, f"Suspended: {', '.join(sorted(suspended))}.", messages.WARNING)

    @admin.action(description="Uphold the selected flags", permissions=["change"])
    def uphold(self, request, queryset):
        self._review(request, queryset, Flag.State.UPHELD, "Upheld")

    @admin.action(description="Dismiss the selected flags", permissions=["change"])
    def dismiss(self, request, queryset):
        self._review(request, queryset, Flag.State.DISMISSED, "Dismissed")

    def has_suspend_permission(self, request) -> bool:
        return self.has_change_permission(request) and request.user.has_perm("accounts.suspend_user")

    @admin.action(description="Uphold and hide the messages…", permissions=["change"])
    def hide(self, request, queryset):
        return self._action_page(request, queryset, "hide", from_list=True)

    @admin.action(description="Warn the users…", permissions=["change"])
    def warn(self, request, queryset):
        return self._action_page(request, queryset, "warn", from_list=True)

    @admin.action(description="Suspend the users for a period…", permissions=["suspend"])
    def suspend(self, request, queryset):
        return self._action_page(request, queryset, "suspend", from_list=True)

    @admin.action(description="Ban the users…", permissions=["suspend"])
    def ban(self, request, queryset):
        return self._action_page(request, queryset, "ban", from_list=True)

    def get_urls(self):
        return [
            path(
                "<int:flag_id>/act/<str:action>/",
                self.admin_site.admin_view(self.act_on_one),
                name="moderation_flag_act",
            ),
            *super().get_urls(),
        ]

    def act_on_one(self, request, flag_id: int, action: str):
        """One flag's action, from the buttons on its page."""
        if action not in QUEUE_ACTIONS:
            raise PermissionDenied
        allowed = self.has_suspend_permission if action in ("suspend", "ban") else self.has_change_permission
        if not allowed(request):
            raise PermissionDenied
        get_object_or_404(Flag, pk=flag_id)
        response = self._action_page(request, Flag.objects.filter(pk=flag_id), action, from_list=False)
        return response or redirect(reverse("admin:moderation_flag_change", args=[flag_id]))

    def _action_page(self, request, queryset, action: str, *, from_list: bool):
        """First a page that says what will happen and asks for the text, then the service: once per
        flag (hide), or once per user over all of their selected flags (warn, suspend, ban)."""
        words = QUEUE_ACTIONS[action]
        flags = list(queryset.select_related("user", "message").order_by("pk"))
        by_user: dict = {}
        for flag in flags:
            if flag.user is not None:
                by_user.setdefault(flag.user, []).append(flag)
        categories = sorted({f.category for f in flags if f.category})
        default = ""
        if action == "warn":
            default = DEFAULT_WARNING.format(category=f" ({', '.join(categories)})" if categories else "")
        text = request.POST.get("text", default) if request.method == "POST" else default
        days_choice = request.POST.get("days", "7")
        error = None
        if request.method == "POST" and "apply" in request.POST:
            text = text.strip()
            days = None if days_choice == "" else whole_number(days_choice, 3650) or -1
            if words["needs_text"] and not text:
                error = "Write the text first: " + words["label"].lower() + "."
            elif action == "suspend" and days not in {d for d, _ in SUSPENSION_DAYS}:
                error = "Choose how long the suspension lasts."
            else:
                try:
                    if action in ("suspend", "ban"):
                        # Staff only by a superuser: asked for the whole selection before the transaction,
                        # so a refusal changes nothing and its audit entries are kept.
                        services.check_may_suspend_for_flags(
                            request.user, by_user, text, ban=action == "ban", days=days
                        )
                    # All or none: one refusal (an answer still running, say) changes nothing.
                    with transaction.atomic():
                        count = self._apply(request, action, flags, by_user, text, days)
                except Refusal as refusal:
                    self.message_user(request, refusal.message, messages.ERROR)
                    return None
                self.message_user(
                    request, words["done"].format(count=count, s="s" if count != 1 else ""), messages.SUCCESS
                )
                return None
        return TemplateResponse(
            request,
            "admin/moderation/flag/act.html",
            {
                **self.admin_site.each_context(request),
                "title": words["title"],
                "words": words,
                "action": action,
                "from_list": from_list,
                "opts": self.model._meta,
                "flags": flags,
                "users": list(by_user),
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
                "text": text,
                "days": days_choice,
                "suspension_days": [("" if d is None else str(d), label) for d, label in SUSPENSION_DAYS],
                "error": error,
            },
        )

    def _apply(self, request, action: str, flags: list[Flag], by_user: dict, text: str, days: int | None) -> int:
        if action == "hide":
            hidden = 0
            for flag in flags:
                if flag.message_id is None or flag.message is None:
                    continue
                services.hide_message(flag, request.user, text)
                hidden += 1
            return hidden
        for user, their_flags in by_user.items():
            if action == "warn":
                services.warn_user(user, text, reviewer=request.user, flags=their_flags)
            elif action == "suspend":
                services.suspend_for_flags(user, text, reviewer=request.user, flags=their_flags, days=days)
            else:
                services.ban_for_flags(user, text, reviewer=request.user, flags=their_flags)
        return len(by_user)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["can_act"] = obj is not None and self.has_change_permission(request, obj)
        # No Suspend…/Ban… buttons on a staff member's flag unless a superuser reads it (a refusal would follow).
        context["can_suspend"] = (
            obj is not None
            and self.has_suspend_permission(request)
            and (obj.user is None or accounts.may_suspend(request.user, obj.user))
        )
        return super().render_change_form(request, context, add, change, form_url, obj)


@admin.register(AccountWarning)
class AccountWarningAdmin(admin.ModelAdmin):
    list_display = ("created", "user", "issued_by", "seen_at", "flag")
    list_select_related = ("user", "issued_by")
    search_fields = ("user__email", "text")
    list_filter = (("seen_at", admin.EmptyFieldListFilter),)
    readonly_fields = ("user", "flag", "text", "issued_by", "created", "seen_at")

    def has_add_permission(self, request):
        return False  # warnings are given from the moderation queue, where they are audited

    def has_change_permission(self, request, obj=None):
        return False

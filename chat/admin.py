"""Staff's view of conversations and shared links.

Conversations: the list shows who, when and which model, never what was said; opening one asks for a
reason first, and reading it is recorded in the audit log (who, when, why).
Shared links: find one (paste the reported address into the search) and take it down with a reason.
Staff see a link's conversation number and owner, not its full address, title or messages (those are
read on the conversation's page, with a reason)."""

from __future__ import annotations

import re

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join

from audit.reading import ask_reason
from chat.feedback import admin as feedback_admin  # noqa: F401  (registers answer feedback's admin)
from chat.models import AutoModelPolicy, Conversation, Message, SemanticCachePolicy, SharedConversation
from chat.selectors import auto_model_report, every_message, semantic_cache_report
from chat.sharing import services
from config.refusals import Refusal
from inference.catalogue import auto_models

REPORTED_ADDRESS = re.compile(r"/s/([A-Za-z0-9_-]+)/?")


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("working", "Working"), ("revoked", "Revoked by the owner"), ("taken_down", "Taken down")]

    def queryset(self, request, queryset):
        if self.value() == "working":
            return queryset.filter(revoked_at__isnull=True, taken_down_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "taken_down":
            return queryset.filter(taken_down_at__isnull=False)
        return queryset


@admin.register(SharedConversation)
class SharedConversationAdmin(admin.ModelAdmin):
    list_display = (
        "link",
        "conversation_number",
        "owner",
        "mode",
        "show_owner_name",
        "show_passages",
        "created",
        "status",
        "taken_down_by",
    )
    list_filter = (StatusFilter, "mode")
    list_select_related = ("conversation__owner", "taken_down_by")
    search_fields = ("=token", "conversation__owner__email")
    search_help_text = "Paste the reported address (…/s/<token>/), or search by the owner's email."
    fields = (
        "link",
        "conversation_number",
        "owner",
        "mode",
        "show_owner_name",
        "show_passages",
        "created",
        "updated",
        "revoked_at",
        "taken_down_at",
        "taken_down_by",
        "takedown_reason",
    )
    readonly_fields = fields
    actions = ("take_down",)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # a takedown stays on record; deleting the conversation removes its links

    @admin.display(description="link")
    def link(self, share: SharedConversation) -> str:
        return f"/s/{share.token[:6]}…"

    @admin.display(description="conversation", ordering="conversation_id")
    def conversation_number(self, share: SharedConversation) -> str:
        # Its number, not its title (what users wrote is read on the conversation's page, with a reason).
        return format_html(
            '<a href="{}">#{}</a>',
            reverse("admin:chat_conversation_change", args=[share.conversation_id]),
            share.conversation_id,
        )

    @admin.display(description="owner", ordering="conversation__owner__email")
    def owner(self, share: SharedConversation) -> str:
        return share.conversation.owner.email

    @admin.display(description="status")
    def status(self, share: SharedConversation) -> str:
        if share.taken_down_at:
            return f"taken down: {share.takedown_reason}"
        return "revoked" if share.revoked_at else "working"

    def get_search_results(self, request, queryset, search_term):
        found = REPORTED_ADDRESS.search(search_term)
        return super().get_search_results(request, queryset, found.group(1) if found else search_term.strip())

    @admin.action(description="Take down the selected links…", permissions=["change"])
    def take_down(self, request, queryset):
        """First a page asking for the reason (the owner is shown it), then the takedown."""
        reason, error = "", None
        if "apply" in request.POST:
            reason = request.POST.get("reason", "")
            try:
                count = services.take_down(request.user, queryset, reason)
            except Refusal as refusal:
                error = refusal.message
            else:
                self.message_user(
                    request,
                    f"Took down {count} link{'s' if count != 1 else ''}, recorded as taken down by "
                    f"{request.user.email}. They answer 404 now.",
                    messages.SUCCESS,
                )
                return None
        return TemplateResponse(
            request,
            "admin/chat/sharedconversation/take_down.html",
            {
                **self.admin_site.each_context(request),
                "title": "Take down shared links",
                "opts": self.model._meta,
                "queryset": queryset.select_related("conversation__owner"),
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
                "reason": reason,
                "error": error,
            },
        )


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("id", "owner", "model", "messages_count", "created", "updated", "archived")
    list_display_links = ("id",)
    list_filter = ("archived", ("created", admin.DateFieldListFilter))
    list_select_related = ("owner",)
    search_fields = ("=id", "owner__email")
    search_help_text = "Search by the owner's email or a conversation's number."
    date_hierarchy = "created"

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(messages_total=Count("messages"))

    @admin.display(description="messages", ordering="messages_total")
    def messages_count(self, conversation: Conversation) -> int:
        return conversation.messages_total

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # what users wrote is theirs: staff read it (with a reason), never edit it

    def has_delete_permission(self, request, obj=None):
        return False

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """A reason first; then the conversation, and an audit entry saying who read it and why."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        conversation = self.get_object(request, unquote(object_id))
        if conversation is None:
            raise Http404("No conversation with that number.")
        reading = ask_reason(request, conversation)
        return TemplateResponse(
            request,
            "admin/chat/conversation/read.html",
            {
                **self.admin_site.each_context(request),
                "title": f"Conversation #{conversation.pk}",
                "subtitle": f"owned by {conversation.owner.email}",
                "opts": self.model._meta,
                "conversation": conversation,
                "reading": reading,
                "summary": f"{conversation.messages.count()} messages, model {conversation.model}, started "
                f"{date_format(timezone.localtime(conversation.created), 'DATETIME_FORMAT')}.",
                "transcript": every_message(conversation) if reading.granted else None,
            },
        )


class OneRowAdmin(admin.ModelAdmin):
    """A settings page: one row, saved the first time, never deleted."""

    def has_add_permission(self, request):
        return super().has_add_permission(request) and not self.model.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False  # set back, not deleted

    def changelist_view(self, request, extra_context=None):
        """The one row's page (or the form that saves it, the first time)."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        row = self.model.objects.order_by("pk").first()
        opts = self.model._meta
        if row is None:
            return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))
        return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[row.pk]))


@admin.register(SemanticCachePolicy)
class SemanticCachePolicyAdmin(OneRowAdmin):
    """The semantic cache's switch, threshold and scope, with what it did last week."""

    fields = ("enabled", "threshold", "scope", "last_week")
    readonly_fields = ("last_week",)

    @admin.display(description="The last 7 days")
    def last_week(self, obj=None) -> str:
        report = semantic_cache_report(days=7)
        rate = "no answers yet" if report["hit_rate"] is None else f"{report['hit_rate']:.1%}"
        reports_url = (
            reverse("admin:chat_answerfeedback_changelist")
            + f"?rating__exact=down&message__cache_hit__exact={Message.CacheHit.SIMILAR}"
        )
        return format_html(
            "{} first answers in the web chat, {} of them from a similar question's answer ({}); "
            '{} thumbs-down on those (wrong hits people reported; <a href="{}">every one, of any week</a>).',
            report["answers"],
            report["similar"],
            rate,
            report["wrong_hit_reports"],
            reports_url,
        )


@admin.register(AutoModelPolicy)
class AutoModelPolicyAdmin(OneRowAdmin):
    """Auto's target share for the large model, with what Auto did last week."""

    fields = ("offered", "large_share_percent", "last_week")
    readonly_fields = ("offered", "last_week")

    @admin.display(description="Auto chooses between")
    def offered(self, obj=None) -> str:
        pair = auto_models()
        if pair is None:
            return "Auto is not offered: INFERENCE_AUTO_MODEL names no small and large model (README)."
        return format_html("{} (small) and {} (large)", pair[0].name, pair[1].name)

    @admin.display(description="The last 7 days")
    def last_week(self, obj=None) -> str:
        report = auto_model_report(days=7)
        if not report["answers"]:
            return "No web chat answer was routed by Auto in the last 7 days."
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} / {}</td></tr>",
            (
                (r["model"], r["answers"], f"{r['share']:.0%}", r["regenerated"], r["up"], r["down"])
                for r in report["models"]
            ),
        )
        routes = ", ".join(f"{route} {n}" for route, n in sorted(report["routes"].items()))
        return format_html(
            "<table><thead><tr><th>model</th><th>answers</th><th>share</th><th>regenerated</th>"
            "<th>thumbs up / down</th></tr></thead><tbody>{}</tbody></table>"
            "<p>Why: {}. Retried on the larger model: {} ({} of Auto's answers).</p>",
            rows,
            routes,
            report["escalated"],
            f"{report['escalated'] / report['answers']:.1%}",
        )

"""Staff's moderation pages (plain Django admin): the rule categories with a "test this text" box,
and the flags, to filter and decide (uphold or dismiss, through `moderation.services`)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Case, IntegerField, Value, When
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from console.services import record
from moderation import services
from moderation.backends import INPUT, OUTPUT
from moderation.backends.rules import compile_category
from moderation.models import Category, Flag


@admin.register(Category)
class CategoryAdmin(admin.ModelAdmin):
    list_display = ("name", "action", "applies_to", "enabled", "word_count", "pattern_count", "updated")
    list_editable = ("enabled",)
    list_filter = ("enabled", "action", "applies_to")
    search_fields = ("name", "description", "words", "patterns")
    fields = ("name", "description", "action", "applies_to", "enabled", "words", "patterns")

    @admin.display(description="words")
    def word_count(self, category: Category) -> int:
        return len(category.word_list())

    @admin.display(description="patterns")
    def pattern_count(self, category: Category) -> int:
        return len(category.pattern_list())

    def get_urls(self):
        return [path("test/", self.admin_site.admin_view(self.test_view), name="moderation_category_test"),
                *super().get_urls()]

    def test_view(self, request):
        """Screen a text as it would be screened now: each category's match, then the configured backends."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        text = request.POST.get("text", "") if request.method == "POST" else ""
        stage = request.POST.get("stage", INPUT) if request.method == "POST" else INPUT
        stage = stage if stage in (INPUT, OUTPUT) else INPUT
        rows, verdict = [], None
        if text.strip():
            for category in Category.objects.order_by("name"):
                applies = category.applies_to in (Category.AppliesTo.BOTH, stage)
                compiled = compile_category(category.name, category.word_list(), category.pattern_list(),
                                            block=category.action == Category.Action.BLOCK)
                found = compiled.regex.search(text) if compiled is not None else None
                rows.append({"category": category, "match": found.group(0) if found else "",
                             "counts": category.enabled and applies})
            verdict = services.judge(text, stage)
        return TemplateResponse(request, "admin/moderation/category/test.html", {
            **self.admin_site.each_context(request),
            "title": "Test a text against the content policy",
            "opts": self.model._meta,
            "text": text,
            "stage": stage,
            "rows": rows,
            "verdict": verdict,
            "backends": ", ".join(services.backends_named()) or "none",
        })

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}),
                                                 "test_url": reverse("admin:moderation_category_test")})


@admin.register(Flag)
class FlagAdmin(admin.ModelAdmin):
    list_display = ("created", "state", "source", "category", "score", "blocked", "user", "excerpt", "reviewer")
    list_display_links = ("created", "state")
    list_filter = ("state", "source", "blocked", "category", ("created", admin.DateFieldListFilter))
    list_select_related = ("user", "reviewer")
    search_fields = ("user__email", "category", "text", "reason", "=message__id")
    search_help_text = "Search the user's email, the category, the text, or an answer's id."
    date_hierarchy = "created"
    fields = ("state", "notes", "source", "category", "score", "backend", "blocked", "user", "reporter",
              "message_link", "reason", "text", "conversation", "reviewer", "reviewed_at", "created")
    readonly_fields = ("source", "category", "score", "backend", "blocked", "user", "reporter", "message_link",
                       "reason", "text", "conversation", "reviewer", "reviewed_at", "created")
    actions = ("uphold", "dismiss")

    def get_queryset(self, request):
        # Open flags first, newest first within each.
        is_open = Case(When(state=Flag.State.OPEN, then=Value(0)), default=Value(1), output_field=IntegerField())
        return super().get_queryset(request).order_by(is_open, "-created")

    def has_add_permission(self, request):
        return False

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
        turns = services.turns_around(flag)
        if not turns:
            return "—"
        return format_html_join("", '<p class="flag-turn{}"><strong>{}</strong> {}</p>',
                                ((" flag-turn--flagged" if m.pk == flag.message_id else "", m.role,
                                  Truncator(m.content or f"({m.status})").chars(600)) for m in turns))

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

"""The content policy's rules in the admin: the categories staff edit, with a "test this text" box that
screens a text as it would be screened now. The flags they open are reviewed in the moderation queue
(review/admin.py)."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path, reverse

from moderation import services
from moderation.backends import INPUT, OUTPUT
from moderation.backends.rules import compile_category
from moderation.models import Category


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
        return [
            path("test/", self.admin_site.admin_view(self.test_view), name="moderation_category_test"),
            *super().get_urls(),
        ]

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
                compiled = compile_category(
                    category.name,
                    category.word_list(),
                    category.pattern_list(),
                    block=category.action == Category.Action.BLOCK,
                )
                found = compiled.regex.search(text) if compiled is not None else None
                rows.append(
                    {
                        "category": category,
                        "match": found.group(0) if found else "",
                        "counts": category.enabled and applies,
                    }
                )
            verdict = services.judge(text, stage)
        return TemplateResponse(
            request,
            "admin/moderation/category/test.html",
            {
                **self.admin_site.each_context(request),
                "title": "Test a text against the content policy",
                "opts": self.model._meta,
                "text": text,
                "stage": stage,
                "rows": rows,
                "verdict": verdict,
                "backends": ", ".join(services.backends_named()) or "none",
            },
        )

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(
            request, {**(extra_context or {}), "test_url": reverse("admin:moderation_category_test")}
        )

"""Staff's view of answer feedback: a list to filter by rating, model and date, each rating beside
the conversation that led to the answer, and an export of the selected ratings as JSONL (the same
records as `manage.py export_feedback`)."""

from __future__ import annotations

from django.contrib import admin
from django.http import StreamingHttpResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from chat.feedback.export import feedback_record, jsonl_lines
from chat.models import AnswerFeedback
from chat.selectors import MessageTree

EXCERPT = 90


def _excerpt(text: str) -> str:
    return Truncator(" ".join(text.split())).chars(EXCERPT)


@admin.register(AnswerFeedback)
class AnswerFeedbackAdmin(admin.ModelAdmin):
    list_display = ("created", "rating_badge", "model", "question", "answer", "comment_excerpt", "user")
    list_display_links = ("created", "rating_badge")
    list_filter = ("rating", ("message__model", admin.AllValuesFieldListFilter), ("created", admin.DateFieldListFilter))
    list_select_related = ("user", "message__parent")
    date_hierarchy = "created"
    search_fields = ("comment", "user__email", "=message__id")
    search_help_text = "Search comments, the user's email, or an answer's id."
    fields = ("rating", "comment", "user", "created", "updated", "model", "node", "conversation_link", "context")
    readonly_fields = fields
    actions = ("export_jsonl",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # a rating is the user's own words: staff read and export it

    @admin.display(description="rating", ordering="rating")
    def rating_badge(self, feedback: AnswerFeedback) -> str:
        return "👍 up" if feedback.rating == AnswerFeedback.Rating.UP else "👎 down"

    @admin.display(description="model", ordering="message__model")
    def model(self, feedback: AnswerFeedback) -> str:
        return feedback.message.model

    @admin.display(description="node")
    def node(self, feedback: AnswerFeedback) -> str:
        return feedback.message.node or "—"

    @admin.display(description="question")
    def question(self, feedback: AnswerFeedback) -> str:
        parent = feedback.message.parent
        return _excerpt(parent.content) if parent else "—"

    @admin.display(description="answer")
    def answer(self, feedback: AnswerFeedback) -> str:
        return _excerpt(feedback.message.content)

    @admin.display(description="comment")
    def comment_excerpt(self, feedback: AnswerFeedback) -> str:
        return _excerpt(feedback.comment) or "—"

    @admin.display(description="conversation")
    def conversation_link(self, feedback: AnswerFeedback) -> str:
        conversation = feedback.message.conversation
        return f"{conversation} (#{conversation.pk}), owned by {conversation.owner.email}"

    @admin.display(description="the conversation up to the rated answer")
    def context(self, feedback: AnswerFeedback) -> str:
        tree = MessageTree(list(feedback.message.conversation.messages.all()))
        record = feedback_record(feedback, tree)
        turns = [*record["context"], {"role": f"rated answer ({record['status']})", "content": record["answer"]}]
        return format_html(
            # Laid out by console.css: the Content-Security-Policy refuses style attributes.
            '<ol class="feedback-context">{}</ol>',
            format_html_join(
                "",
                '<li><strong>{}</strong><div class="feedback-turn">{}</div></li>',
                ((turn["role"], turn["content"]) for turn in turns),
            ),
        )

    @admin.action(description="Export the selected ratings as JSONL", permissions=["view"])
    def export_jsonl(self, request, queryset):
        rows = queryset.select_related("message__conversation").order_by("created", "pk")
        response = StreamingHttpResponse(
            jsonl_lines(rows.iterator(chunk_size=1000)), content_type="application/x-ndjson; charset=utf-8"
        )
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="feedback-{stamp}.jsonl"'
        return response

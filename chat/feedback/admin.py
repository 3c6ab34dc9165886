"""Staff's view of answer feedback: a list to filter by rating, model and date, each rating's page, and
an export of the selected ratings as JSONL (the same records as `manage.py export_feedback`).

The list and a rating's page show the rating, its comment, the model and who gave it, never what was
said: the conversation up to the rated answer (its system prompt, the turns, the answer) is shown only
once a reason is given, which is recorded (audit.reading, as on a conversation's page). An export
asks for a reason too, and is recorded with its row count (chat.feedback.services.export_ratings)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator

from audit.reading import ask_reason
from chat.feedback.export import feedback_record
from chat.feedback.services import export_ratings
from chat.models import AnswerFeedback
from chat.selectors import MessageTree
from config.refusals import Refusal

EXCERPT = 90


def _excerpt(text: str) -> str:
    return Truncator(" ".join(text.split())).chars(EXCERPT)


@admin.register(AnswerFeedback)
class AnswerFeedbackAdmin(admin.ModelAdmin):
    list_display = ("created", "rating_badge", "answer_model", "answer", "comment_excerpt", "user")
    list_display_links = ("created", "rating_badge")
    list_filter = (
        "rating",
        ("message__model", admin.AllValuesFieldListFilter),
        ("message__cache_hit", admin.ChoicesFieldListFilter),  # wrong hits of the response cache
        ("created", admin.DateFieldListFilter),
    )
    list_select_related = ("user", "message")
    date_hierarchy = "created"
    search_fields = ("comment", "user__email", "=message__id")
    search_help_text = "Search comments, the user's email, or an answer's id."
    actions = ("export_jsonl",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # a rating is the user's own words: staff read and export it

    @admin.display(description="rating", ordering="rating")
    def rating_badge(self, feedback: AnswerFeedback) -> str:
        return "👍 up" if feedback.rating == AnswerFeedback.Rating.UP else "👎 down"

    # Not named `model`: that is the admin's own model class (the column read "answer feedback").
    @admin.display(description="model", ordering="message__model")
    def answer_model(self, feedback: AnswerFeedback) -> str:
        return feedback.message.model

    @admin.display(description="answer", ordering="message_id")
    def answer(self, feedback: AnswerFeedback) -> str:
        # Which answer, not what it said (that is read on the rating's page, with a reason).
        return f"#{feedback.message_id} in conversation #{feedback.message.conversation_id}"

    @admin.display(description="comment")
    def comment_excerpt(self, feedback: AnswerFeedback) -> str:
        return _excerpt(feedback.comment) or "—"

    # --- a rating's page: what anyone with the role sees, then the conversation with a reason ------------

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        feedback = self.get_object(request, unquote(object_id))
        if feedback is None:
            raise Http404("No rating with that number.")
        answer = feedback.message
        conversation = answer.conversation
        tree = MessageTree(list(conversation.messages.all()))
        before = len(tree.path_to(tree.get(answer.pk) or answer)) - 1
        reading = ask_reason(request, conversation, {"feedback_id": feedback.pk, "message_id": answer.pk})
        return TemplateResponse(
            request,
            "admin/chat/answerfeedback/read.html",
            {
                **self.admin_site.each_context(request),
                "title": f"{feedback.get_rating_display()} on answer #{answer.pk}",
                "opts": self.model._meta,
                "original": feedback,
                "feedback": feedback,
                "answer": answer,
                "conversation": conversation,
                "conversation_url": reverse("admin:chat_conversation_change", args=[conversation.pk]),
                "reading": reading,
                "summary": f"{before} message{'s' if before != 1 else ''} before the answer.",
                "changed": feedback.updated - feedback.created > timedelta(seconds=1),
                "turns": self._turns(feedback, tree) if reading.granted else None,
                "has_delete_permission": self.has_delete_permission(request, feedback),
            },
        )

    @staticmethod
    def _turns(feedback: AnswerFeedback, tree: MessageTree) -> list[dict]:
        """The conversation up to the rated answer, as the export writes it: system prompt, turns, answer."""
        record = feedback_record(feedback, tree)
        return [*record["context"], {"role": f"rated answer ({record['status']})", "content": record["answer"]}]

    # --- the export: a reason first, then the file; recorded with its row count ------------------------

    @admin.action(description="Export the selected ratings as JSONL…", permissions=["view"])
    def export_jsonl(self, request, queryset):
        reason, error = "", None
        if "apply" in request.POST:
            reason = request.POST.get("reason", "").strip()
            rows = queryset.select_related("message__conversation").order_by("created", "pk")
            try:
                lines = export_ratings(request.user, rows, reason, via="console")
            except Refusal as refusal:
                error = refusal.message
            else:
                response = StreamingHttpResponse(lines, content_type="application/x-ndjson; charset=utf-8")
                stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
                response["Content-Disposition"] = f'attachment; filename="feedback-{stamp}.jsonl"'
                return response
        select_across = request.POST.get("select_across") == "1"
        return TemplateResponse(
            request,
            "admin/chat/answerfeedback/export.html",
            {
                **self.admin_site.each_context(request),
                "title": "Export ratings",
                "opts": self.model._meta,
                "count": queryset.count(),
                "select_across": select_across,
                "selected": [] if select_across else request.POST.getlist(ACTION_CHECKBOX_NAME),
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
                "reason": reason,
                "error": error,
            },
        )

from django.urls import path

from chat import api
from chat.feedback import api as feedback_api
from chat.sharing import api as sharing_api

app_name = "chat"

urlpatterns = [
    path("api/models", api.models, name="models"),
    path("api/conversations", api.conversations, name="conversations"),
    path("api/conversations/<int:conversation_id>", api.conversation, name="conversation"),
    path("api/conversations/<int:conversation_id>/export", api.export, name="conversation-export"),
    path("api/conversations/<int:conversation_id>/share", sharing_api.conversation_share, name="conversation-share"),
    path("api/send", api.send, name="send"),
    path("api/messages/<int:message_id>/regenerate", api.regenerate, name="message-regenerate"),
    path("api/messages/<int:message_id>/edit", api.edit, name="message-edit"),
    path("api/messages/<int:message_id>/stop", api.stop, name="message-stop"),
    path("api/messages/<int:message_id>/stream", api.stream, name="message-stream"),
    path("api/messages/<int:message_id>/feedback", feedback_api.message_feedback, name="message-feedback"),
    path("api/messages/<int:message_id>/report", api.report_message, name="message-report"),
]

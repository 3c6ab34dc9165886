from django.urls import path

from chat import api, files_api
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
    path("api/files", files_api.documents, name="documents"),
    path("api/files/<int:document_id>", files_api.document, name="document"),
    path("api/files/<int:document_id>/cancel", files_api.cancel, name="document-cancel"),
    path("api/files/<int:picture_id>/picture", files_api.picture, name="picture"),
    path("api/passages/<int:chunk_id>", files_api.passage, name="passage"),
    path("api/collections", files_api.collection_list, name="collections"),
    path("api/messages/<int:message_id>/regenerate", api.regenerate, name="message-regenerate"),
    path("api/messages/<int:message_id>/continue", api.continue_answer, name="message-continue"),
    path("api/messages/<int:message_id>/edit", api.edit, name="message-edit"),
    path("api/messages/<int:message_id>/stop", api.stop, name="message-stop"),
    path("api/messages/<int:message_id>/stream", api.stream, name="message-stream"),
    path("api/messages/<int:message_id>/feedback", feedback_api.message_feedback, name="message-feedback"),
    path("api/messages/<int:message_id>/report", api.report_message, name="message-report"),
]

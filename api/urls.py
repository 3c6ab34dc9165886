from django.urls import path

from api import embeddings, response_views, views
from api.openapi import openapi_document

app_name = "api"

urlpatterns = [
    path("chat/completions", views.chat_completions, name="chat-completions"),
    path("completions", views.text_completions, name="completions"),
    path("embeddings", embeddings.embeddings, name="embeddings"),
    path("responses", response_views.create_response, name="responses"),
    path("responses/<str:response_id>", response_views.response_item, name="response"),
    path("models", views.models, name="models"),
    path("openapi.json", openapi_document, name="openapi"),
    path("models/<path:model_id>", views.model, name="model"),
]

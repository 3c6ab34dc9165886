from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from api import embeddings, response_views, views
from api.fallback import unknown_endpoint
from api.openapi import openapi_document

app_name = "api"

urlpatterns = [
    # A wrong method is a 405 (the middleware words it as OpenAI's error: api/middleware.py), never a CSRF
    # refusal: the API takes a bearer key, never the session's cookie.
    path("chat/completions", require_POST(views.chat_completions), name="chat-completions"),
    path("completions", require_POST(views.text_completions), name="completions"),
    path("embeddings", require_POST(embeddings.embeddings), name="embeddings"),
    path("responses", require_POST(response_views.create_response), name="responses"),
    path(
        "responses/<str:response_id>",
        require_http_methods(["GET", "DELETE"])(response_views.response_item),
        name="response",
    ),
    path("models", csrf_exempt(views.models), name="models"),
    path("openapi.json", csrf_exempt(require_GET(openapi_document)), name="openapi"),
    path("models/<path:model_id>", csrf_exempt(views.model), name="model"),
    # Last: any other path under /v1/ is OpenAI's JSON 404.
    re_path(r"^", unknown_endpoint, name="unknown"),
]

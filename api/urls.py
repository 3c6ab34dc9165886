from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from api import views
from api.fallback import unknown_endpoint
from api.openapi import openapi_document

app_name = "api"

urlpatterns = [
    # A wrong method is a 405 (the middleware words it as OpenAI's error: api/middleware.py), never a CSRF
    # refusal: the API takes a bearer key, never the session's cookie.
    path("chat/completions", require_POST(views.chat_completions), name="chat-completions"),
    path("models", csrf_exempt(views.models), name="models"),
    path("openapi.json", csrf_exempt(require_GET(openapi_document)), name="openapi"),
    path("models/<path:model_id>", csrf_exempt(views.model), name="model"),
    # Last: any other path under /v1/ is OpenAI's JSON 404.
    re_path(r"^", unknown_endpoint, name="unknown"),
]

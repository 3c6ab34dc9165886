"""ASGI entry point for Daphne: HTTP through Django, WebSockets through Channels.

Wiring, like config/urls.py: one of the two modules of config that import the apps (and that nothing
imports; docs/ARCHITECTURE.md, "Layering"). Each app that serves WebSockets exposes
`websocket_urlpatterns` in its routing.py; they are joined here behind session authentication and an
Origin check against ALLOWED_HOSTS. With EMBEDDED_BEAT (the embedded default) the application also
runs Celery beat's schedule in-process.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)  # before importing anything that touches models (as get_asgi_application does)

from config.api_handler import APIHandler  # noqa: E402
from config.loop_handler import LoopHandler  # noqa: E402

#: Django, its middleware on the event loop (config/loop_handler.py).
django_asgi_app = LoopHandler()
#: The OpenAI-compatible API: Django with only the middleware programs need (config/api_handler.py).
api_asgi_app = APIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from chat.answer_stream import AnswerStreamConsumer  # noqa: E402
from chat.routing import websocket_urlpatterns as chat_websockets  # noqa: E402
from config.edge import http_edge  # noqa: E402
from config.embedded_beat import RunBeatSchedule  # noqa: E402
from config.tracing import set_up, traced_asgi  # noqa: E402

#: The WebSocket routes of every app, in one list.
websocket_urlpatterns = [*chat_websockets]

# Spans exported when tracing is on (config/tracing.py): one server span per HTTP request, for as long as
# its response streams; a WebSocket's commands are a trace each (chat.consumers).
set_up("sglchat-web")

application = ProtocolTypeRouter(
    {
        # Answers' SSE streams beside Django (chat/answer_stream.py); the API through Django with its own
        # middleware (config/api_handler.py); everything else through Django. All behind the security
        # headers, the overload gate and the body limit (config/edge.py).
        "http": traced_asgi(
            http_edge(
                URLRouter(
                    [
                        path("chat/api/messages/<int:message_id>/stream", AnswerStreamConsumer.as_asgi()),
                        re_path(r"^v1(?:/|$)", api_asgi_app),
                        re_path(r"", django_asgi_app),
                    ]
                )
            )
        ),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

if settings.EMBEDDED_BEAT:
    # The embedded default runs Celery beat's schedule on this process's event loop.
    application = RunBeatSchedule(application)

"""WebSocket routes of every app, in one list."""

from chat.routing import websocket_urlpatterns as chat_routes

websocket_urlpatterns = [*chat_routes]

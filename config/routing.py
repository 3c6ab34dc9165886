"""WebSocket routes of every app, in one list."""

websocket_urlpatterns: list = []

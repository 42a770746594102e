"""Websocket routes, included by config/asgi.py. The frontend consumers add theirs here."""

websocket_urlpatterns: list = []

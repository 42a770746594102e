"""Websocket routes, included by config/asgi.py."""

from django.urls import path, re_path

from frontend.consumers import DashboardConsumer, NotFoundConsumer

websocket_urlpatterns = [
    path("ws/dashboard/", DashboardConsumer.as_asgi()),
    # Last: any other path is closed as not found (the router raised for it).
    re_path(r"", NotFoundConsumer.as_asgi()),
]

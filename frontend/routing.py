"""Websocket routes, included by config/asgi.py."""

from django.urls import path

from frontend.consumers import DashboardConsumer

websocket_urlpatterns = [
    path("ws/dashboard/", DashboardConsumer.as_asgi()),
]

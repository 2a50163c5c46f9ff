"""The WebSocket routes (console/asgi.py serves them; the tests drive them directly)."""

from django.urls import re_path

from console.consumers import LiveConsumer

websocket_urls = [re_path(r"^ws/live/(?P<group>[a-z0-9-]{1,80})/$", LiveConsumer.as_asgi())]

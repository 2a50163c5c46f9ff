"""ASGI entry point: HTTP through Django, WebSockets through Channels (session-authenticated).

/metrics (the gateway's figures for Prometheus) is answered before Django's middleware: it takes
an API key as well as a staff login. The gateway itself (/v1/…) runs as its own process
(gateway/asgi.py)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django_http = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from console.demo_passwords import refuse_demo_passwords  # noqa: E402
from console.routing import websocket_urls  # noqa: E402
from gateway.app import in_front_of  # noqa: E402

refuse_demo_passwords("web process")

application = ProtocolTypeRouter(
    {
        "http": in_front_of(django_http),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urls))),
    }
)

"""The gateway as its own server process (Procfile: ``gateway``), e.g.

    uvicorn gateway.asgi:application --host 127.0.0.1 --port 8001 --no-access-log

Measured faster than routing /v1/ through the console's daphne (tests/bench/bench_gateway.py),
so the console's web process serves pages and the chat, and this one serves the API.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django.setup()

from console.demo_passwords import refuse_demo_passwords  # noqa: E402
from gateway.app import application  # noqa: E402  (needs Django set up first)

refuse_demo_passwords("gateway")

__all__ = ["application"]

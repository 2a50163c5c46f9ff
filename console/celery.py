"""The Celery app (Redis broker). Tasks carry ids only; the database row is the truth."""

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("berth")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def refuse_demo_passwords_at_start(**kwargs: object) -> None:
    """Celery only logs what a signal's receiver raises: the worker must exit, saying why."""
    from django.core.exceptions import ImproperlyConfigured

    from console.demo_passwords import refuse_demo_passwords

    try:
        refuse_demo_passwords("worker")
    except ImproperlyConfigured as refused:
        raise SystemExit(f"ImproperlyConfigured: {refused}") from None

"""The Celery app (Redis broker). Tasks carry ids only; the database row is the truth."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("berth")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

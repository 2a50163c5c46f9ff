"""The data migration that scrubs engine keys from lines stored before redaction existed."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.utils import timezone

from deployments.choices import LogStream
from deployments.models import Copy, Deployment, LogLine
from tests import factories

pytestmark = pytest.mark.django_db
scrub = importlib.import_module("deployments.migrations.0006_scrub_engine_keys_from_lines")


def test_lines_and_errors_stored_with_a_key_are_scrubbed(red):
    deployment = factories.make_deployment("old", red, last_error_message="bad key s3cret-key")
    copy = factories.make_copy(deployment)
    copy.set_engine_api_key("s3cret-key")
    copy.last_error_message = "401 for s3cret-key"
    copy.save()
    now = timezone.now()
    stored = [
        LogLine(deployment=deployment, copy=copy, stream=LogStream.ENGINE, seq=n, at=now, text=t)
        for n, t in enumerate(["args: {'api_key': ['s3cret-key']}", "a line", "key s3cret-key"])
    ]
    LogLine.objects.bulk_create(stored)  # as they were stored before redaction
    scrub.scrub_lines(apps, None)
    texts = list(LogLine.objects.order_by("seq").values_list("text", flat=True))
    assert texts == ["args: {'api_key': ['[hidden]']}", "a line", "key [hidden]"]
    assert Copy.objects.get(pk=copy.pk).last_error_message == "401 for [hidden]"
    assert Deployment.objects.get(pk=deployment.pk).last_error_message == "bad key [hidden]"

"""Retention: each copy keeps its newest lines; older ones are pruned, others untouched."""

from __future__ import annotations

import pytest
from django.utils import timezone

from deployments.choices import LogStream
from deployments.logs import prune, write_lines
from deployments.models import LogLine
from tests import factories

pytestmark = pytest.mark.django_db


def test_pruning_keeps_the_newest_lines_of_each_copy(red):
    deployment = factories.make_deployment("chatty", red)
    first, second = factories.make_copy(deployment, 0), factories.make_copy(deployment, 1)
    now = timezone.now()
    write_lines(
        deployment.pk, [(first, LogStream.ENGINE, "INFO", now, f"a{n}") for n in range(150)]
    )
    write_lines(
        deployment.pk, [(second, LogStream.ENGINE, "INFO", now, f"b{n}") for n in range(20)]
    )
    assert prune(100) == 50
    kept = LogLine.objects.filter(copy=first).order_by("seq")
    assert kept.count() == 100 and kept.first().text == "a50" and kept.last().text == "a149"
    assert LogLine.objects.filter(copy=second).count() == 20
    assert prune(100) == 0


def test_a_copys_key_never_reaches_the_stored_lines(red):
    deployment = factories.make_deployment("leaky", red)
    copy = factories.make_copy(deployment)
    copy.set_engine_api_key("engine-key-of-any-shape")
    copy.save()
    write_lines(
        deployment.pk,
        [(copy, LogStream.ENGINE, "INFO", timezone.now(), "echo engine-key-of-any-shape here")],
    )
    assert LogLine.objects.get(copy=copy).text == "echo [hidden] here"

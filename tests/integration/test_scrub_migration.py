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


@pytest.mark.django_db(transaction=True)  # the migration renames a table: no pending row events
def test_machine_files_rows_survive_their_move_from_catalog_to_deployments(red):
    """catalog 0007 + deployments 0009 move the model's state only; the table keeps its rows."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    deployment = factories.make_deployment("kept", red)
    machine = deployment.cluster.machines.first()
    before = [("deployments", "0008_copy_socket_path"), ("catalog", "0006_gated_access")]
    try:
        state = MigrationExecutor(connection).migrate(before)
        old = state.apps.get_model("catalog", "MachineFiles")
        old.objects.create(machine_id=machine.pk, variant_id=deployment.variant_id, revision="abc")
    finally:  # back to the newest migrations, whatever happened
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    from deployments.models import MachineFiles

    (row,) = MachineFiles.objects.all()
    assert (row.machine_id, row.variant_id, row.revision) == (
        machine.pk,
        deployment.variant_id,
        "abc",
    )

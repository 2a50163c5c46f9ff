"""The admin never shows a secret and never edits a state or a reservation."""

from __future__ import annotations

import pytest

from deployments.choices import CopyState
from deployments.models import Copy, Reservation
from tests import factories

pytestmark = pytest.mark.django_db
KUBECONFIG = (
    "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: sekrit-token-123\n"
)


def test_a_copys_engine_key_is_never_shown(as_alice, red):
    copy = factories.make_copy(factories.make_deployment("keyed", red))
    copy.set_engine_api_key("engine-secret-xyz")
    copy.save()
    page = as_alice.get(f"/admin/deployments/copy/{copy.pk}/change/").content.decode()
    assert "engine-secret-xyz" not in page and copy.engine_api_key_encrypted not in page
    assert Copy.objects.get(pk=copy.pk).engine_api_key() == "engine-secret-xyz"


def test_reservations_and_copies_are_read_only_in_the_admin(as_alice, red):
    copy = factories.make_copy(factories.make_deployment("held", red))
    cluster = copy.deployment.cluster
    gpu = cluster.machines.first().accelerators.first()
    reservation = Reservation.objects.create(
        copy=copy, machine=gpu.machine, accelerator=gpu, reserved_bytes=10, share=1
    )
    assert as_alice.get("/admin/deployments/reservation/add/").status_code == 403
    as_alice.post(
        f"/admin/deployments/reservation/{reservation.pk}/change/", {"reserved_bytes": "1"}
    )
    assert Reservation.objects.get(pk=reservation.pk).reserved_bytes == 10
    as_alice.post(f"/admin/deployments/copy/{copy.pk}/change/", {"state": CopyState.READY})
    assert Copy.objects.get(pk=copy.pk).state == CopyState.REQUESTED


def test_machine_files_are_listed_read_only_in_the_admin(as_alice, red):
    from catalog.models import ServerModel
    from deployments.models import MachineFiles

    deployment = factories.make_deployment("files-admin", red)
    row = MachineFiles.objects.create(
        machine=deployment.cluster.machines.first(), variant=deployment.variant, state="present"
    )
    ServerModel.objects.create(variant=deployment.variant, state="ready")
    listing = as_alice.get("/admin/deployments/machinefiles/").content.decode()
    assert "On the machine" in listing
    assert as_alice.get("/admin/deployments/machinefiles/add/").status_code == 403
    as_alice.post(f"/admin/deployments/machinefiles/{row.pk}/change/", {"state": "missing"})
    assert MachineFiles.objects.get(pk=row.pk).state == "present"

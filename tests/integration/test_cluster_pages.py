"""A cluster's page shows each accelerator's free budget and which copies hold the rest."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.core.management import call_command

from clusters.models import Accelerator, Cluster, present_gpu_count
from deployments.models import Reservation
from tests import factories

pytestmark = pytest.mark.django_db


def test_the_demo_cluster_page_lists_machines_gpus_slices_and_holders(as_carol, red):
    call_command("seed_demo")
    cluster = Cluster.objects.get(name="demo")
    deployment = factories.make_deployment("holder", red, cluster=cluster)
    copy = factories.make_copy(deployment)
    gpu = Accelerator.objects.get(machine__name="h100-1", index=0, parent=None)
    Reservation.objects.create(
        copy=copy,
        machine=gpu.machine,
        accelerator=gpu,
        reserved_bytes=40 * 2**30,
        share=Decimal("0.5"),
    )
    page = as_carol.get(f"/clusters/{cluster.pk}/").content.decode()
    for text in [
        "h100-1",
        "h200-mig",
        "l4-shared",
        "MIG 3g.71gb",
        "Time-sliced × 4",
        "holder</a> copy 0 (40.00 GiB)",
        "39.65 GiB free",
        "79.65 GiB free",
    ]:
        assert text in page, text


def test_the_cluster_list_counts_the_gpus_discovery_still_reports_as_the_api_does(as_carol):
    call_command("seed_demo")
    demo = Cluster.objects.get(name="demo")
    counted = Cluster.objects.annotate(gpus=present_gpu_count("machines__accelerators"))
    before = counted.get(pk=demo.pk).gpus
    Accelerator.objects.filter(machine__name="h100-1", index=3).update(present=False)
    row = f"<td>{before - 1}</td><td>{demo.get_sharing_strategy_display()}</td>"
    page = as_carol.get("/clusters/").content.decode()
    assert row in re.sub(r">\s+<", "><", page)  # the cells as a row reads, whatever the layout
    assert Accelerator.objects.present_gpus().filter(machine__cluster=demo).count() == before - 1


def test_a_cluster_without_sharing_explains_the_notice(as_carol):
    cluster = factories.make_cluster("plain", sharing="")
    Cluster.objects.filter(pk=cluster.pk).update(notices=["SharingNotConfigured"])
    page = as_carol.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "GPUs are not shared" in page and "Enable time-slicing, MPS or MIG" in page


def test_a_standalone_cluster_on_a_machine_without_nvidia_devices_hosts_on_its_cpu(
    as_alice, tmp_path, settings
):
    from clusters.inventory import refresh

    settings.STATE_DIR = tmp_path
    cluster = Cluster.objects.create(name="this-box", kind="standalone")
    refresh(cluster)  # this machine has no /dev/nvidia* at all
    page = as_alice.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "no NVIDIA devices on this machine: it hosts on its CPU" in page
    (machine,) = Cluster.objects.get(pk=cluster.pk).machines.all()
    (cpu,) = machine.accelerators.all()
    assert cpu.vendor == "cpu" and cpu.product in page


def test_a_cluster_whose_gpu_driver_does_not_answer_explains_the_notice(as_carol):
    cluster = factories.make_cluster("broken-driver", sharing="")
    Cluster.objects.filter(pk=cluster.pk).update(notices=["DriverNotWorking"])
    page = as_carol.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "their driver does not answer" in page and "not used as a CPU machine" in page

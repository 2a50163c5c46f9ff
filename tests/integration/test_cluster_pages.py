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
    row = f"<td>{before - 1} GPUs</td><td>{demo.get_sharing_strategy_display()}</td>"
    page = as_carol.get("/clusters/").content.decode()
    assert row in re.sub(r">\s+<", "><", page)  # the cells as a row reads, whatever the layout
    assert Accelerator.objects.present_gpus().filter(machine__cluster=demo).count() == before - 1


def cells_of(page: str, name: str) -> str:
    """The cells of the list's row for the cluster `name`, as a row reads, whatever the layout."""
    row = re.search(rf"<tr><td><a [^>]*>{name}</a></td>(.*?)</tr>", re.sub(r">\s+<", "><", page))
    assert row is not None, f"no row for {name}"
    return row.group(1)


def test_the_cluster_list_counts_a_cpu_machine_by_cores_and_memory_and_gpus_as_gpus(as_carol):
    factories.make_cpu_cluster("cpu-box", cores=16, system_gib=32, reserve_gib=8)
    factories.make_cluster("lab", gpus=2)
    page = as_carol.get("/clusters/").content.decode()
    assert '<a href="?sort=gpus">Hardware</a>' in page
    assert cells_of(page, "cpu-box") == (
        "<td>Standalone (this machine)</td><td>Ready</td><td>1</td>"
        "<td>1 CPU machine · 16 cores · 24.00 GiB for engines</td>"
        "<td>Fractional (byte budgets)</td>"
    )
    assert cells_of(page, "lab") == (
        "<td>Simulated</td><td>Connecting</td><td>1</td><td>2 GPUs</td>"
        "<td>Fractional (byte budgets)</td>"
    )


def test_a_cpu_clusters_page_says_its_cores_and_memory_and_a_gpu_clusters_its_gpus(as_carol):
    cpu_box = factories.make_cpu_cluster("cpu-box", cores=16, system_gib=32, reserve_gib=8)
    lab = factories.make_cluster("lab", gpus=1)
    page = as_carol.get(f"/clusters/{cpu_box.pk}/").content.decode()
    assert '<p id="hardware">1 CPU machine · 16 cores · 24.00 GiB for engines</p>' in page
    assert "16 CPUs · 32.00 GiB system memory" in page
    assert (
        ": 24.00 GiB free, at most 24.00 GiB on one CPU machine; 0% of the free room lies in "
        "pieces (on CPU machines some copy uses)."
    ) in page
    assert "GPU;" not in page and "1 GPU" not in page
    page = as_carol.get(f"/clusters/{lab.pk}/").content.decode()
    assert '<p id="hardware">1 GPU</p>' in page
    assert (
        "NVIDIA-H100-80GB-HBM3: 79.65 GiB free, at most 79.65 GiB on one GPU; 0% of the free "
        "room lies in pieces (on GPUs some copy uses)."
    ) in page


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

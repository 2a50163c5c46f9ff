"""Ray clusters, against a real Ray cluster the tests start (ray.cluster_utils.Cluster: a head
with its dashboard and two GPU nodes declaring their GPUs and accelerator types): added from a
terminal or the admin's form only after Berth connected and read the versions, its nodes
discovered with their GPUs, a GPU type whose memory nobody declared placing nothing (and saying
which type to declare), a node that dies becoming not ready; bad input refused in words with
nothing saved; copies hosted there are tests/integration/test_ray_copies.py's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from clusters.admin import ClusterAdminForm
from clusters.backends.ray.dashboard import version_mismatch
from clusters.inventory import refresh
from clusters.models import Cluster, ClusterState
from clusters.ray_driver import start_if_ray, stop
from tests.processes import ROOT, database_url_for_tests, wait_for

pytestmark = pytest.mark.timeout(240)


def add(name: str, *options: str) -> Cluster:
    call_command("addcluster", name, "--kind", "ray", *options)
    return Cluster.objects.get(name=name)


@pytest.mark.django_db
def test_added_from_a_terminal_its_nodes_are_discovered_and_undeclared_memory_places_nothing(
    ray_cluster,
):
    cluster = add("ray", "--address", ray_cluster.address, "--gpu-memory", "H100=80")
    cluster.refresh_from_db()
    machines = {m.labels.get("zone", "none"): m for m in cluster.machines.all()}
    assert len(machines) == 2  # the head has no GPU: nothing to place on
    h100 = machines["a"]
    gpus = list(h100.accelerators.order_by("index"))
    assert h100.ready and [g.product for g in gpus] == ["H100", "H100"]
    assert {g.memory_bytes for g in gpus} == {80 << 30}
    assert h100.cpu_count == 1 and h100.labels["ray.io/node-id"]
    a100 = machines["none"]
    assert not a100.ready  # its GPU memory is unknown: no copy goes there
    assert a100.accelerators.count() == 4
    assert cluster.state == ClusterState.DEGRADED
    assert "GPU memory unknown for accelerator type A100" in cluster.discovery_message
    assert "--gpu-memory TYPE=GiB" in cluster.discovery_message

    # Declared in the admin's form, the A100 node takes copies at the next discovery.
    form = ClusterAdminForm(
        data={**form_fields(cluster), "gpu_memory_gib": '{"H100": 80, "A100": 40}'},
        instance=cluster,
    )
    assert form.is_valid(), form.errors
    form.save()
    refresh(Cluster.objects.get(pk=cluster.pk))
    assert Cluster.objects.get(pk=cluster.pk).machines.filter(ready=True).count() == 2


@pytest.mark.parametrize(
    "options,words",
    [
        (["--address", "127.0.0.1:1"], "nothing answers at 127.0.0.1:1"),
        (["--address", "http://127.0.0.1:8265"], "is not a Ray address: give the head's address"),
        (["--address", "head"], "is not a Ray address"),
        ([], "A Ray cluster needs its address"),
        (["--address", "http://h:1", "--gpu-memory", "H100=lots"], "'H100=lots' is not TYPE=GiB"),
        (["--address", "http://h:1", "--gpu-memory", "H100=0"], "above 0, at most 1024"),
        (["--address", "http://h:1", "--kubeconfig", "k.yaml"], "--kubeconfig is for --kind kubernetes only"),
        (["--address", "http://h:1", "--token-env", "BERTH_NO_SUCH_TOKEN"], "that variable is not set"),
        (["--address", "http://h:1", "--token-file", "/nonexistent/token"], "cannot read it"),
    ],
)  # fmt: skip
@pytest.mark.django_db
def test_bad_input_is_refused_in_words_and_nothing_is_saved(options, words):
    with pytest.raises(CommandError) as refused:
        add("refused", *options)
    assert words in str(refused.value)
    assert not Cluster.objects.filter(name="refused").exists()


@pytest.mark.django_db
def test_the_admin_form_checks_the_cluster_and_keeps_the_token_write_only(ray_cluster):
    bad = ClusterAdminForm(data={**form_fields(), "address": "127.0.0.1:1"})
    assert not bad.is_valid()
    assert "nothing answers at 127.0.0.1:1" in bad.errors["address"][0]
    declared = ClusterAdminForm(data={**form_fields(), "gpu_memory_gib": '{"H100": -1}'})
    assert not declared.is_valid()
    assert "is not a GPU memory" in declared.errors["gpu_memory_gib"][0]
    # A cluster without token auth takes a token it ignores; it is kept encrypted, never shown.
    good = ClusterAdminForm(data={**form_fields(), "address": ray_cluster.address,
                                  "ray_token": "not-shown-back"})  # fmt: skip
    assert good.is_valid(), good.errors
    saved = good.save()
    assert saved.has_ray_token and "not-shown-back" not in saved.ray_token_encrypted
    assert saved.ray_token() == "not-shown-back"
    assert saved.dashboard_url == ray_cluster.dashboard  # found when connecting
    assert "not-shown-back" not in ClusterAdminForm(instance=saved).as_p()


def test_a_version_mismatch_is_refused_with_both_versions():
    words = version_mismatch("2.41.0", "3.11.7")
    assert words and "the cluster runs Ray 2.41.0 and this console Ray 2.60.0" in words
    python = version_mismatch("2.60.0", "3.9.18")
    assert python and "the cluster runs Python 3.9.18" in python
    assert version_mismatch("2.60.0", "3.11.2") is None


# NVML's binding as a node with two NVIDIA L4 GPUs has it (nvidia-ml-py's names and units): the
# NVIDIA library itself cannot run here. The node's workers find it first on their PYTHONPATH.
NVML_OF_TWO_L4 = """
MIB = 1 << 20
class Memory:
    total, free, used = 23034 * MIB, 22800 * MIB, 234 * MIB
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(index): return index
def nvmlDeviceGetName(handle): return "NVIDIA L4"
def nvmlDeviceGetMemoryInfo(handle): return Memory()
"""


@pytest.mark.django_db
def test_gpu_memory_is_read_with_nvml_on_each_node_and_where_it_cannot_be_nvml_says_why(
    ray_cluster, tmp_path
):
    binding = tmp_path / "nvml"
    binding.mkdir()
    (binding / "pynvml.py").write_text(NVML_OF_TWO_L4)
    l4 = ray_cluster.cluster.add_node(num_cpus=1, num_gpus=2, env_vars={"PYTHONPATH": str(binding)},
                                      resources={"accelerator_type:L4": 1})  # fmt: skip
    ray_cluster.cluster.wait_for_nodes()
    cluster = add("ray-nvml", "--address", ray_cluster.address)  # no memory declared
    driver = start_if_ray(cluster.pk)
    try:

        def measured() -> bool:
            refresh(Cluster.objects.get(pk=cluster.pk))
            return cluster.machines.filter(ready=True).exists()

        wait_for(measured, 120, every=1, what="the L4 node measured by NVML on the node")
        (ready,) = cluster.machines.filter(ready=True)
        assert [(g.product, g.memory_bytes) for g in ready.accelerators.order_by("index")] == [
            ("L4", 23034 << 20),
            ("L4", 23034 << 20),
        ]
        # The H100 and A100 nodes have no NVIDIA driver here: NVML says so, and they get no copy.
        assert cluster.machines.filter(ready=False).count() == 2
        message = Cluster.objects.get(pk=cluster.pk).discovery_message
        assert (
            "GPU memory unknown for accelerator type A100, H100 (NVML on their nodes: NVML does "
            "not start there: NVML Shared Library Not Found)" in message
        )
    finally:
        stop(driver)
        ray_cluster.cluster.remove_node(l4)


@pytest.mark.django_db
def test_a_node_that_dies_becomes_not_ready(ray_cluster):
    # Last in this module: the node does not come back.
    cluster = add("ray-dies", "--address", ray_cluster.address, "--gpu-memory", "H100=80",
                  "--gpu-memory", "A100=40")  # fmt: skip
    assert cluster.machines.filter(ready=True).count() == 2
    ray_cluster.cluster.remove_node(ray_cluster.a100)

    def one_left() -> bool:
        refresh(Cluster.objects.get(pk=cluster.pk))
        return cluster.machines.filter(ready=True).count() == 1

    wait_for(one_left, 90, every=1, what="the dead node not ready")
    assert not cluster.machines.get(accelerators__product="A100", accelerators__index=0).ready


def form_fields(cluster: Cluster | None = None) -> dict[str, str]:
    return {
        "name": cluster.name if cluster else "ray-form",
        "kind": "ray",
        "topology": "managed_cluster",
        "address": cluster.address if cluster else "",
        "gpu_memory_gib": '{"H100": 80}',
        "namespace": "berth",
        "engine_image": "vllm/vllm-openai",
        "sharing_strategy": "fractional",
        "simulated_inventory": "{}",
        "repack_policy": "off",  # the page's own initial values
        "consolidate_above_percent": "30",
        "consolidate_below_load": "1",
    }


# addcluster as run in a console whose environment lacks Ray (the import fails as it would).
WITHOUT_RAY = """
import runpy, sys
sys.modules["ray"] = None
sys.argv = ["manage.py", "addcluster", "no-ray", "--kind", "ray", "--address", "127.0.0.1:6379",
            "--gpu-memory", "H100=80"]
runpy.run_path("manage.py", run_name="__main__")
"""


@pytest.mark.django_db(transaction=True)
def test_without_ray_installed_adding_a_ray_cluster_says_how_to_install_it():
    env = {**os.environ, "DATABASE_URL": database_url_for_tests()}
    done = subprocess.run([sys.executable, "-c", WITHOUT_RAY], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1
    assert 'pip install "berth[ray]" (Ray 2.60.0), then restart the console.' in done.stderr
    assert not Cluster.objects.filter(name="no-ray").exists()

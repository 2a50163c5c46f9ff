"""On Kubernetes a stop is only a delete request: the copy keeps its room while its pod still
runs (terminating, its GPU still full), and gives it back when the pod is seen gone; so does a
copy stopped for starting too slowly. Engines this install started that no copy owns are swept,
and only those (every object carries the install's id)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone
from kube_fixtures import NAMESPACE, KmockServer, h100_node, kubeconfig, pod_of_deployment, running
from kubernetes import client

from clusters.backends.base import CopySpec
from clusters.models import Cluster, ClusterKind, Machine
from clusters.registry import backend_for, install_id
from deployments import launching, reconciler
from deployments.choices import CopyState
from deployments.guard import state_change_allowed
from deployments.models import Copy, Event, Reservation
from deployments.watcher import stopped_running
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube():
    server = KmockServer().start()
    yield server
    server.stop()


ARGV = ("vllm", "serve", "m", "--host", "0.0.0.0", "--port", "8000")


def kube_cluster(kube):
    cluster = Cluster.objects.create(name="k", kind=ClusterKind.KUBERNETES, namespace=NAMESPACE)
    cluster.set_kubeconfig(kubeconfig(kube.url))
    cluster.save()
    machine = Machine.objects.create(cluster=cluster, name="gpu-h100-a", cpu_count=8)
    api = client.ApiClient(client.Configuration(host=kube.url))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_node(h100_node())
    return cluster, machine, core, apps


def test_a_stopping_pod_keeps_its_room_until_it_is_seen_gone(kube, red):
    cluster, machine, core, apps = kube_cluster(kube)
    deployment = factories.make_deployment("held", red, cluster=cluster)
    copy = factories.make_copy(deployment)
    backend = backend_for(cluster)
    argv = ("vllm", "serve", "m", "--host", "0.0.0.0", "--port", "8000")
    spec = CopySpec(copy.pk, "held", 0, argv, {}, "gpu-h100-a", gpu_indexes=(0,))
    backend.launch(spec)
    pod = pod_of_deployment(apps, "held-0", "held-0-abc", "gpu-h100-a")
    pod["status"] = running(ready=True)
    core.create_namespaced_pod(NAMESPACE, pod)
    Reservation.objects.create(copy=copy, machine=machine, reserved_bytes=1 << 30, share=1)
    with state_change_allowed():
        Copy.objects.filter(pk=copy.pk).update(state=CopyState.STOPPING, pod_name="held-0-abc")

    launching.stop(copy.pk)  # the Deployment is deleted; the pod still runs (terminating)

    assert Copy.objects.get(pk=copy.pk).state == CopyState.STOPPING
    assert Reservation.objects.filter(copy=copy).exists()
    core.delete_namespaced_pod("held-0-abc", NAMESPACE)
    (seen,) = backend.observe([launching.handle_for(Copy.objects.get(pk=copy.pk))])
    assert seen.status == "gone"
    stopped_running(Copy.objects.get(pk=copy.pk), seen)  # what the watcher does when it sees it
    assert Copy.objects.get(pk=copy.pk).state == CopyState.STOPPED
    assert not Reservation.objects.filter(copy=copy).exists()


def test_a_copy_stopped_for_starting_too_slowly_keeps_its_room_until_its_pod_is_gone(kube, red):
    cluster, machine, core, apps = kube_cluster(kube)
    deployment = factories.make_deployment("slow", red, cluster=cluster)
    copy = factories.make_copy(deployment)
    backend = backend_for(cluster)
    backend.launch(CopySpec(copy.pk, "slow", 0, ARGV, {}, "gpu-h100-a", gpu_indexes=(0,)))
    pod = pod_of_deployment(apps, "slow-0", "slow-0-abc", "gpu-h100-a")
    pod["status"] = running(ready=False)  # loading, and past its deadline
    core.create_namespaced_pod(NAMESPACE, pod)
    Reservation.objects.create(copy=copy, machine=machine, reserved_bytes=1 << 30, share=1)
    started = timezone.now() - timedelta(seconds=400)
    with state_change_allowed():
        Copy.objects.filter(pk=copy.pk).update(
            state=CopyState.STARTING,
            pod_name="slow-0-abc",
            started_at=started,
            startup_deadline=started + timedelta(seconds=300),
        )

    reconciler.reap_stuck()  # its Deployment is deleted; the pod still runs (terminating)

    assert apps.list_namespaced_deployment(NAMESPACE).items == []
    assert Copy.objects.get(pk=copy.pk).state == CopyState.STARTING
    assert Reservation.objects.filter(copy=copy).exists()
    core.delete_namespaced_pod("slow-0-abc", NAMESPACE)
    (seen,) = backend.observe([launching.handle_for(Copy.objects.get(pk=copy.pk))])
    stopped_running(Copy.objects.get(pk=copy.pk), seen)  # what the watcher does when it sees it
    failed = Copy.objects.get(pk=copy.pk)
    assert failed.state == CopyState.FAILED
    assert failed.last_error_code == "STARTUP_TIMEOUT"
    assert failed.last_error_message == "The engine did not become ready within 300 s."
    assert not Reservation.objects.filter(copy=copy).exists()


def test_only_this_installs_deployments_that_no_copy_owns_are_swept(kube, red, settings, tmp_path):
    settings.STATE_DIR = tmp_path
    cluster, _, _, apps = kube_cluster(kube)
    owned = factories.make_copy(factories.make_deployment("owned", red, cluster=cluster))
    with state_change_allowed():
        Copy.objects.filter(pk=owned.pk).update(state=CopyState.READY)
    backend = backend_for(cluster)
    for copy_id, name, install in [
        (owned.pk, "owned", install_id()),
        (10**9, "stray", install_id()),
        (10**9, "theirs", "another-install"),  # the same copy id, another console's
    ]:
        spec = CopySpec(copy_id, name, 0, ARGV, {}, "gpu-h100-a", gpu_indexes=(0,))
        backend.launch(replace(spec, install_id=install))

    assert reconciler.sweep_strays() == 0  # kmock gives no creation time: taken as new
    assert reconciler.sweep_strays(now=timezone.now() + timedelta(seconds=200)) == 1
    left = {item.metadata.name for item in apps.list_namespaced_deployment(NAMESPACE).items}
    assert left == {"owned-0", "theirs-0"}
    said = Event.objects.get(deployment_name="stray")
    assert f"(copy {10**9} of stray, cluster k, running since" in said.message

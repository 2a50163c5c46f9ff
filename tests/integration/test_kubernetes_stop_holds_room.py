"""On Kubernetes a stop is only a delete request: the copy keeps its room while its pod still
runs (terminating, its GPU still full), and gives it back when the pod is seen gone."""

from __future__ import annotations

import pytest
from kube_fixtures import NAMESPACE, KmockServer, h100_node, kubeconfig, pod_of_deployment, running
from kubernetes import client

from clusters.backends.base import CopySpec
from clusters.models import Cluster, ClusterKind, Machine
from clusters.registry import backend_for
from clusters.watcher import stopped_running
from deployments import launching
from deployments.choices import CopyState
from deployments.guard import state_change_allowed
from deployments.models import Copy, Reservation
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube():
    server = KmockServer().start()
    yield server
    server.stop()


def test_a_stopping_pod_keeps_its_room_until_it_is_seen_gone(kube, red):
    cluster = Cluster.objects.create(name="k", kind=ClusterKind.KUBERNETES, namespace=NAMESPACE)
    cluster.set_kubeconfig(kubeconfig(kube.url))
    cluster.save()
    machine = Machine.objects.create(cluster=cluster, name="gpu-h100-a", cpu_count=8)
    api = client.ApiClient(client.Configuration(host=kube.url))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_node(h100_node())
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

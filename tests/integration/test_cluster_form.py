"""Adding a Kubernetes cluster: a bad kubeconfig gets a clear message and nothing is stored."""

from __future__ import annotations

import kmock
import pytest
from kubernetes import client

from clusters.models import Cluster
from tests.integration.kube_fixtures import KmockServer, closed_port, h100_node, kubeconfig

pytestmark = pytest.mark.django_db


def add_cluster(client, config: str):
    return client.post(
        "/admin/clusters/cluster/add/",
        {
            "name": "prod",
            "kind": "kubernetes",
            "topology": "managed_cluster",
            "namespace": "berth",
            "engine_image": "vllm/vllm-openai",
            "sharing_strategy": "",
            "simulated_inventory": "{}",
            "repack_policy": "off",  # the page's own initial values
            "consolidate_above_percent": "30",
            "consolidate_below_load": "1",
            "kubeconfig": config,
            "machines-TOTAL_FORMS": "0",
            "machines-INITIAL_FORMS": "0",
        },
    )


@pytest.fixture
def kube():
    server = KmockServer().start()
    yield server
    server.stop()


def test_a_malformed_kubeconfig_is_refused_and_nothing_is_stored(as_alice):
    page = add_cluster(as_alice, "this: is: not: yaml: [").content.decode()
    assert "kubeconfig" in page.lower() and "errorlist" in page
    assert not Cluster.objects.filter(name="prod").exists()


def test_an_unreachable_api_server_is_refused_with_where_it_tried(as_alice):
    config = kubeconfig(f"http://127.0.0.1:{closed_port()}", token="tok-secret-1")
    page = add_cluster(as_alice, config).content.decode()
    assert "127.0.0.1" in page and "errorlist" in page
    assert "tok-secret-1" not in page
    assert not Cluster.objects.filter(name="prod").exists()


def test_a_kubeconfig_without_permissions_is_refused(as_alice, kube):
    kube.script(
        "list v1/nodes",
        kmock.KubernetesError(status=403, reason="Forbidden", message="nodes is forbidden"),
    )
    page = add_cluster(as_alice, kubeconfig(kube.url, token="tok-secret-2")).content.decode()
    assert "may not list nodes (403 Forbidden)" in page
    assert "tok-secret-2" not in page
    assert not Cluster.objects.filter(name="prod").exists()


def test_a_working_kubeconfig_is_stored_encrypted(as_alice, kube):
    api = client.ApiClient(client.Configuration(host=kube.url))
    client.CoreV1Api(api).create_node(h100_node())
    api.close()
    response = add_cluster(as_alice, kubeconfig(kube.url, token="tok-secret-3"))
    assert response.status_code == 302, response.content.decode()[-3000:]
    cluster = Cluster.objects.get(name="prod")
    assert "tok-secret-3" not in cluster.kubeconfig_encrypted
    assert "tok-secret-3" in cluster.kubeconfig()
    for page in ("/admin/clusters/cluster/", f"/admin/clusters/cluster/{cluster.pk}/change/"):
        shown = as_alice.get(page).content.decode()
        assert "tok-secret-3" not in shown and cluster.kubeconfig_encrypted not in shown


def test_a_kubernetes_cluster_needs_a_kubeconfig(as_alice):
    page = add_cluster(as_alice, "").content.decode()
    assert "A Kubernetes cluster needs a kubeconfig: paste one." in page


def test_removing_a_cluster_that_has_deployments_is_refused(as_alice, red):
    from tests import factories

    deployment = factories.make_deployment("holds", red)
    cluster = deployment.cluster
    page = as_alice.post(
        f"/admin/clusters/cluster/{cluster.pk}/delete/", {"post": "yes"}
    ).content.decode()
    assert "Cannot delete cluster" in page
    assert Cluster.objects.filter(pk=cluster.pk).exists()

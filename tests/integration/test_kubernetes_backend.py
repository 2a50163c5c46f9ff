"""The Kubernetes backend against kmock, a real HTTP API server in a background thread.

The backend talks to the emulator through the official (sync) `kubernetes` client, built from a
kubeconfig text exactly as in production. What kmock 0.8 does not do, and how the tests stand in:

- No controllers, scheduler or kubelet: a Deployment makes no pod. Tests create the pod the
  controller would make (from Berth's own pod template) and patch its status as a kubelet would.
- Label and field selectors are ignored: the backend filters by label itself, and these tests
  put pods that are not Berth's next to Berth's to prove it.
- It never sends 410 Gone: the test scripts an ERROR event with code 410 on the first watch.
- It ignores resourceVersion and timeoutSeconds: every watch replays all pods as ADDED, and an
  idle watch ends only by the client's read timeout (the backend dedupes and resumes).
- It only recognises `watch=true`, and kubernetes 34 sends `watch=True` (a real API server takes
  both): the test server lower-cases it on the way in (kube_fixtures.lowercase_watch).
- Pod logs and the /metrics proxy are not emulated: the tests script those endpoints; `sinceSeconds`
  is not applied by kmock, so the backend's own filtering of older lines is what is tested.
- No authentication or authorization: a 403 (or 401) is scripted on the list it refuses.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import kmock
import pytest
import yaml
from kube_fixtures import (
    CA_DATA,
    GIB,
    IMAGE,
    MIB,
    NAMESPACE,
    TOKEN,
    KmockServer,
    a100_mps_node,
    closed_port,
    cpu_node,
    engine_status,
    h100_node,
    h200_mig_mixed_node,
    kubeconfig,
    l40s_time_sliced_node,
    mi210_node,
    pod_of_deployment,
    raw,
    running,
    unlabelled_gpu_node,
    wait_until,
    workload_pod,
)
from kubernetes import client

from clusters.backends import kubernetes as kubernetes_backend
from clusters.backends.base import (
    NOTICE_PARTIAL_DISCOVERY,
    NOTICE_SHARING_NOT_CONFIGURED,
    BackendError,
    CopyHandle,
    CopySpec,
    LogRecord,
    MetricSample,
    ModelFiles,
    Observation,
)
from clusters.backends.kubernetes import ConnectionCheck, KubernetesBackend
from clusters.backends.kubernetes.filljob import build_fill_job, bytes_reported, fill_job_name
from clusters.backends.kubernetes.manifests import ManifestSettings

POD = "qwen-chat-0-7d4b9c8f6-x2k8p"
QWEN_ARGV = (
    "vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct", "--served-model-name", "qwen-chat",
    "--host", "127.0.0.1", "--port", "8000", "--gpu-memory-utilization", "0.8",
)  # fmt: skip
COPY_LABELS = {
    "app.kubernetes.io/managed-by": "berth",
    "app.kubernetes.io/name": "vllm",
    "app.kubernetes.io/instance": "qwen-chat-0",
    "berth.io/copy-id": "7",
    "berth.io/deployment": "qwen-chat",
    "berth.io/ordinal": "0",
}
COPY_SELECTOR = {"app.kubernetes.io/managed-by": "berth", "berth.io/copy-id": "7"}
# The client's own use of a deprecated urllib3 call; nothing of Berth's.
pytestmark = pytest.mark.filterwarnings("ignore:HTTPResponse.getheaders:DeprecationWarning")
FLATTEN = "Export it with `kubectl config view --raw --minify --flatten` and paste that."


@pytest.fixture
def kube() -> Iterator[KmockServer]:
    server = KmockServer().start()
    yield server
    server.stop()


@pytest.fixture
def api(kube: KmockServer) -> Iterator[client.ApiClient]:
    """A plain client of the emulator, for what the tests set up and read back."""
    api = client.ApiClient(client.Configuration(host=kube.url))
    yield api
    api.close()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


@pytest.fixture
def backend(kube: KmockServer) -> Iterator[KubernetesBackend]:
    text = kubeconfig(kube.url)
    with KubernetesBackend(text, NAMESPACE, IMAGE, watch_timeout_s=1) as backend:
        yield backend


@pytest.fixture
def cluster(core: client.CoreV1Api) -> None:
    for body in (
        h100_node(),
        h100_node("gpu-h100-down", ready=False),
        h200_mig_mixed_node(),
        l40s_time_sliced_node(),
        mi210_node(),
        unlabelled_gpu_node(),
        cpu_node(),
    ):
        core.create_node(body)


def machines(backend: KubernetesBackend) -> dict:
    return {machine.name: machine for machine in backend.discover().machines}


def copy_spec(**changes: object) -> CopySpec:
    values: dict = {
        "copy_id": 7,
        "deployment_name": "qwen-chat",
        "ordinal": 0,
        "argv": QWEN_ARGV,
        "env": {"VLLM_LOGGING_LEVEL": "INFO", "CUDA_VISIBLE_DEVICES": "0"},
        "machine": "gpu-h100-a",
        "gpu_indexes": (0,),
        "memory_share": 0.8,
        "port": 8000,
        "secret_env": {"VLLM_API_KEY": "copy-key-1"},
    }
    return CopySpec(**{**values, **changes})


def start_pod(apps: client.AppsV1Api, core: client.CoreV1Api, **metadata: object) -> str:
    """Launch's Deployment gets its pod, as the controller would make it."""
    pod = pod_of_deployment(apps, "qwen-chat-0", POD, "gpu-h100-a")
    pod["metadata"].update(metadata)
    core.create_namespaced_pod(NAMESPACE, pod)
    return POD


def set_status(core: client.CoreV1Api, status: dict) -> None:
    core.patch_namespaced_pod_status(POD, NAMESPACE, {"status": status})


# --- discovery ---------------------------------------------------------------------------------


def test_two_h100s_are_read_from_the_gpu_feature_discovery_labels(backend, cluster):
    h100 = machines(backend)["gpu-h100-a"]

    assert [gpu.index for gpu in h100.accelerators] == [0, 1]
    gpu = h100.accelerators[0]
    assert (gpu.vendor, gpu.product, gpu.memory_bytes) == (
        "nvidia",
        "NVIDIA-H100-80GB-HBM3",
        81559 * MIB,
    )
    assert (gpu.compute_capability, gpu.driver_version, gpu.cuda_version) == (
        "9.0",
        "550.90.07",
        "12.4",
    )
    assert (gpu.hardware_class, gpu.sharing_class, gpu.replicas) == (
        "software_shared",
        "whole_gpu",
        1,
    )
    assert (h100.ready, h100.capacity_known) == (True, True)
    assert (h100.cpu_count, h100.system_memory_bytes) == (64, 515543004 * 1024)
    assert h100.labels["nvidia.com/mig.config"] == "all-disabled"


def test_a_mig_mixed_h200_is_hardware_isolated_and_lists_its_slices(backend, cluster):
    (gpu,) = machines(backend)["gpu-h200-mig"].accelerators

    assert (gpu.product, gpu.memory_bytes) == ("NVIDIA-H200", 143771 * MIB)
    assert (gpu.hardware_class, gpu.sharing_class) == ("hardware_isolated", "mig")
    assert [(s.index, s.profile, s.memory_bytes) for s in gpu.slices] == [
        (0, "1g.18gb", 16384 * MIB),
        (1, "1g.18gb", 16384 * MIB),
        (2, "2g.35gb", 33280 * MIB),
        (3, "3g.71gb", 69888 * MIB),
    ]


def test_time_slicing_and_mps_nodes_report_their_replicas(backend, cluster, core):
    core.create_node(a100_mps_node())
    found = machines(backend)

    sliced = found["gpu-l40s-ts"].accelerators
    assert [(g.product, g.sharing_class, g.replicas) for g in sliced] == [
        ("NVIDIA-L40S", "time_sliced", 4),
        ("NVIDIA-L40S", "time_sliced", 4),
    ]
    assert (sliced[0].compute_capability, sliced[0].driver_version, sliced[0].cuda_version) == (
        "8.9",
        "550.107.02",
        "12.4",
    )
    (mps,) = found["gpu-a100-mps"].accelerators
    assert (mps.hardware_class, mps.sharing_class, mps.replicas) == ("software_shared", "mps", 10)


def test_an_amd_node_is_read_from_the_amd_node_labeller(backend, cluster):
    gpus = machines(backend)["gpu-mi210"].accelerators

    facts = [(g.vendor, g.product, g.memory_bytes, g.driver_version, g.sharing_class) for g in gpus]
    assert facts == [("amd", "Instinct_MI210", 64 * GIB, "6.10.5", "whole_gpu")] * 2


def test_a_gpu_node_without_labels_is_reported_with_unknown_capacity(backend, cluster):
    discovery = backend.discover()
    found = {machine.name: machine for machine in discovery.machines}

    assert (found["gpu-new"].capacity_known, found["gpu-new"].accelerators) == (False, ())
    assert discovery.notices == (NOTICE_PARTIAL_DISCOVERY,)
    assert discovery.message == (
        "7 nodes, 6 with GPUs; 9 GPUs free for Berth. "
        'Node "gpu-new": it has GPUs but no GPU Feature Discovery labels '
        "(nvidia.com/gpu.product, nvidia.com/gpu.memory)."
    )
    # A node without any GPU is fully known: it simply has none.
    assert (found["control-plane"].capacity_known, found["control-plane"].accelerators) == (
        True,
        (),
    )


def test_a_node_that_is_not_ready_is_reported_not_ready(backend, cluster):
    found = machines(backend)

    assert (found["gpu-h100-down"].ready, found["gpu-h100-a"].ready) == (False, True)


def test_gpu_nodes_without_any_sharing_strategy_raise_sharing_not_configured(backend, core):
    core.create_node(h100_node("gpu-h100-a"))
    core.create_node(h100_node("gpu-h100-b"))

    discovery = backend.discover()

    assert discovery.notices == (NOTICE_SHARING_NOT_CONFIGURED,)
    assert discovery.message == (
        "2 nodes, 2 with GPUs; 4 GPUs free for Berth. No GPU sharing (MIG, time-slicing or MPS) "
        "is configured: a copy that asks for part of a GPU takes a whole one."
    )


def test_gpus_that_other_workloads_hold_are_not_offered_to_berth(backend, cluster, core):
    held = {
        "notebook": ("gpu-h100-a", {"nvidia.com/gpu": "1"}, "Running"),
        "finished-job": ("gpu-h100-a", {"nvidia.com/gpu": "1"}, "Succeeded"),
        "mig-job": ("gpu-h200-mig", {"nvidia.com/mig-1g.18gb": "1"}, "Running"),
        "sliced-job": ("gpu-l40s-ts", {"nvidia.com/gpu": "1"}, "Running"),
    }
    for name, (node_name, resources, phase) in held.items():
        core.create_namespaced_pod(
            "research", workload_pod(name, "research", node_name, resources, phase)
        )
    # Berth's own copy holds the other H100; its use is counted from Berth's reservations.
    berths = workload_pod("qwen-chat-0-abc", NAMESPACE, "gpu-h100-a", {"nvidia.com/gpu": "1"})
    berths["metadata"]["labels"] = COPY_LABELS
    core.create_namespaced_pod(NAMESPACE, berths)
    # Another Berth (its own namespace) is another workload as far as this one is concerned.
    staging = workload_pod("chat-0-abc", "berth-staging", "gpu-mi210", {"amd.com/gpu": "1"})
    staging["metadata"]["labels"] = {**COPY_LABELS, "berth.io/copy-id": "1"}
    core.create_namespaced_pod("berth-staging", staging)

    found = machines(backend)

    assert (len(found["gpu-h100-a"].accelerators), found["gpu-h100-a"].free_units) == (
        1,
        {"nvidia.com/gpu": 1},
    )
    (h200,) = found["gpu-h200-mig"].accelerators
    assert [s.profile for s in h200.slices] == ["1g.18gb", "2g.35gb", "3g.71gb"]
    assert found["gpu-h200-mig"].free_units["nvidia.com/mig-1g.18gb"] == 1
    # 7 of 8 shares are free; the GPU holding the 8th is not Berth's to budget.
    assert found["gpu-l40s-ts"].free_units == {"nvidia.com/gpu": 7}
    assert len(found["gpu-l40s-ts"].accelerators) == 1
    assert (len(found["gpu-mi210"].accelerators), found["gpu-mi210"].free_units) == (
        1,
        {"amd.com/gpu": 1},
    )


def test_discovery_without_rights_to_other_namespaces_pods_is_partial(backend, kube, core):
    core.create_node(h100_node())
    kube.script("list v1/pods", forbidden("pods is forbidden"))

    discovery = backend.discover()

    assert len(discovery.machines[0].accelerators) == 2
    assert discovery.notices == (NOTICE_PARTIAL_DISCOVERY, NOTICE_SHARING_NOT_CONFIGURED)
    assert (
        "GPUs that other workloads hold could not be subtracted: The kubeconfig's user may not "
        "list pods in all namespaces (403 Forbidden)."
    ) in discovery.message


def test_an_unreachable_cluster_is_discovered_unreachable_without_the_token():
    port = closed_port()
    with KubernetesBackend(kubeconfig(f"http://127.0.0.1:{port}"), NAMESPACE) as backend:
        discovery = backend.discover()

    assert (discovery.reachable, discovery.machines) == (False, ())
    assert discovery.message.startswith(
        f"Cannot reach the Kubernetes API server at http://127.0.0.1:{port}: "
        "the connection was refused."
    )
    assert TOKEN not in discovery.message


# --- launch and stop ---------------------------------------------------------------------------


def test_launch_creates_the_copys_deployment_and_service(backend, cluster, apps, core):
    handle = backend.launch(copy_spec())

    assert handle == CopyHandle(7, machine="gpu-h100-a", port=8000)
    deployment = raw(
        apps.read_namespaced_deployment("qwen-chat-0", NAMESPACE, _preload_content=False)
    )
    assert deployment["metadata"]["labels"] == COPY_LABELS
    spec = deployment["spec"]
    assert (spec["replicas"], spec["strategy"]) == (1, {"type": "Recreate"})
    assert spec["selector"] == {"matchLabels": COPY_SELECTOR}
    assert spec["template"]["metadata"]["labels"] == COPY_LABELS
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-h100-a"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert pod["enableServiceLinks"] is False
    assert pod["automountServiceAccountToken"] is False  # no API token for an engine
    # No shared claim in the namespace: the node's own directory holds the model cache.
    assert pod["volumes"] == [
        {
            "name": "model-cache",
            "hostPath": {"path": "/var/lib/berth/model-cache", "type": "DirectoryOrCreate"},
        },
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
    ]
    (container,) = pod["containers"]
    assert (container["name"], container["image"], container["command"]) == (
        "vllm",
        IMAGE,
        ["vllm", "serve"],
    )
    assert container["args"] == [
        "Qwen/Qwen2.5-0.5B-Instruct", "--served-model-name", "qwen-chat", "--port", "8000",
        "--gpu-memory-utilization", "0.8", "--host", "0.0.0.0",
    ]  # fmt: skip
    assert container["resources"] == {
        "requests": {"nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    # CUDA_VISIBLE_DEVICES is dropped: the device plugin chooses the GPU on Kubernetes.
    assert container["env"] == [
        {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
        {
            "name": "HF_TOKEN",
            "valueFrom": {
                "secretKeyRef": {"name": "berth-hf-token", "key": "token", "optional": True}
            },
        },
        {
            "name": "VLLM_API_KEY",
            "valueFrom": {
                "secretKeyRef": {"name": "qwen-chat-0-engine-key", "key": "VLLM_API_KEY"}
            },
        },
    ]
    # The engine key is in the copy's own Secret, never in the Deployment itself.
    assert "copy-key-1" not in json.dumps(deployment)
    secret = raw(
        core.read_namespaced_secret("qwen-chat-0-engine-key", NAMESPACE, _preload_content=False)
    )
    assert secret["metadata"]["labels"] == COPY_LABELS
    # kmock keeps the body as posted; an API server would have turned stringData into data.
    assert secret.get("stringData") == {"VLLM_API_KEY": "copy-key-1"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000}]
    assert container["readinessProbe"] == {
        "httpGet": {"path": "/health", "port": 8000},
        "periodSeconds": 5,
        "failureThreshold": 3,
    }
    # Read-only, and only the shared hub: the teams' own caches beside it stay out of sight.
    assert container["volumeMounts"] == [
        {
            "name": "model-cache",
            "readOnly": True,
            "mountPath": "/root/.cache/huggingface/hub",
            "subPath": "hub",
        },
        {"name": "shm", "mountPath": "/dev/shm"},
    ]
    service = raw(core.read_namespaced_service("qwen-chat-0", NAMESPACE, _preload_content=False))
    assert service["metadata"]["labels"] == COPY_LABELS
    assert service["spec"] == {
        "selector": COPY_SELECTOR,
        "ports": [{"name": "http", "port": 8000, "targetPort": 8000}],
    }


def test_launching_a_copy_again_creates_nothing_new(backend, cluster, kube, apps, core):
    posted_deployments = ("post", kmock.resource("apps/v1/deployments"))
    posted_services = ("post", kmock.resource("v1/services"))

    backend.launch(copy_spec())
    backend.launch(copy_spec())

    assert (kube.count(posted_deployments), kube.count(posted_services)) == (1, 1)
    # A launch that stopped half-way is completed: only the missing Service is made.
    core.delete_namespaced_service("qwen-chat-0", NAMESPACE)
    backend.launch(copy_spec())
    assert (kube.count(posted_deployments), kube.count(posted_services)) == (1, 2)
    assert [d.metadata.name for d in apps.list_namespaced_deployment(NAMESPACE).items] == [
        "qwen-chat-0"
    ]


def test_a_leftover_of_an_earlier_copy_with_the_same_name_is_replaced(backend, cluster, apps):
    backend.launch(copy_spec(copy_id=3))
    backend.launch(copy_spec(copy_id=7))

    deployment = apps.read_namespaced_deployment("qwen-chat-0", NAMESPACE)
    assert deployment.metadata.labels["berth.io/copy-id"] == "7"


@pytest.mark.parametrize(
    "changes, resource",
    [
        ({"machine": "gpu-h200-mig", "mig_profile": "2g.35gb"}, "nvidia.com/mig-2g.35gb"),
        ({"machine": "gpu-mi210", "gpu_indexes": (0, 1)}, "amd.com/gpu"),
        ({"machine": "gpu-l40s-ts", "memory_share": 0.5}, "nvidia.com/gpu"),
    ],
    ids=["mig slice", "two AMD GPUs", "time-sliced share"],
)
def test_the_copy_asks_for_the_resource_its_node_advertises(
    backend, cluster, apps, changes, resource
):
    spec = copy_spec(**changes)
    backend.launch(spec)

    pod = apps.read_namespaced_deployment("qwen-chat-0", NAMESPACE).spec.template.spec
    count = str(len(spec.gpu_indexes)) if not spec.mig_profile else "1"
    assert pod.containers[0].resources.limits == {resource: count}
    assert pod.containers[0].resources.requests == {resource: count}
    assert pod.node_selector == {"kubernetes.io/hostname": spec.machine}


def test_launch_on_a_node_that_left_the_cluster_says_so(backend, cluster):
    with pytest.raises(BackendError, match='^Node "gpu-gone" is no longer in the cluster.$'):
        backend.launch(copy_spec(machine="gpu-gone"))


def test_launch_fences_the_engine_port_to_berths_gateway_and_console(backend, cluster):
    backend.launch(copy_spec())
    networking = client.NetworkingV1Api(backend.api)
    policy = raw(
        networking.read_namespaced_network_policy(
            "qwen-chat-0-engine", NAMESPACE, _preload_content=False
        )
    )
    assert policy["metadata"]["labels"] == COPY_LABELS
    assert policy["spec"] == {
        "podSelector": {"matchLabels": COPY_SELECTOR},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [
                    {
                        "namespaceSelector": {},
                        "podSelector": {
                            "matchLabels": {"app.kubernetes.io/part-of": "berth"},
                            "matchExpressions": [
                                {
                                    "key": "app.kubernetes.io/component",
                                    "operator": "In",
                                    "values": ["gateway", "console"],
                                }
                            ],
                        },
                    }
                ],
                "ports": [{"protocol": "TCP", "port": 8000}],
            }
        ],
    }


def test_the_api_servers_addresses_can_be_admitted_too():
    from clusters.backends.kubernetes.manifests import build_network_policy

    settings = ManifestSettings(engine_client_cidrs=("10.0.0.1/32",))
    policy = build_network_policy(copy_spec(), NAMESPACE, settings)
    assert policy["spec"]["ingress"][0]["from"][1] == {"ipBlock": {"cidr": "10.0.0.1/32"}}


def test_stop_deletes_the_copys_deployment_and_service_only(backend, cluster, apps, core):
    handle = backend.launch(copy_spec())
    backend.launch(copy_spec(copy_id=8, ordinal=1))

    backend.stop(handle)
    backend.stop(handle)  # nothing left to delete is fine

    assert [d.metadata.name for d in apps.list_namespaced_deployment(NAMESPACE).items] == [
        "qwen-chat-1"
    ]
    assert [s.metadata.name for s in core.list_namespaced_service(NAMESPACE).items] == [
        "qwen-chat-1"
    ]
    keys = [s.metadata.name for s in core.list_namespaced_secret(NAMESPACE).items]
    assert "qwen-chat-0-engine-key" not in keys and "qwen-chat-1-engine-key" in keys
    policies = client.NetworkingV1Api(backend.api).list_namespaced_network_policy(NAMESPACE)
    assert [p.metadata.name for p in policies.items] == ["qwen-chat-1-engine"]


@pytest.mark.parametrize(
    "deployment_name, ordinal, expected",
    [
        ("qwen-chat", 0, "qwen-chat-0"),
        ("7b-chat", 2, "berth-7b-chat-2"),
        ("Llama_3.1", 1, "llama-3-1-1"),
    ],
)
def test_object_names_are_dns_labels(deployment_name, ordinal, expected):
    assert kubernetes_backend.object_name(deployment_name, ordinal) == expected


def test_long_object_names_are_cut_and_stay_apart():
    first = kubernetes_backend.object_name("a" * 70 + "-first", 3)
    second = kubernetes_backend.object_name("a" * 70 + "-second", 3)

    assert first != second
    assert all(re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", n) for n in (first, second))


# --- observation -------------------------------------------------------------------------------


def test_a_copy_moves_from_starting_to_ready_as_its_pod_does(backend, cluster, apps, core):
    handle = backend.launch(copy_spec())
    assert backend.observe([handle]) == [Observation(7, "starting", message="Waiting for the pod.")]

    uuid = "GPU-3b7a8c9e-1f2d-4e5a-9b6c-7d8e9f0a1b2c"
    start_pod(apps, core, annotations={"example.com/gpu-devices": uuid, "note": "GPU-less"})
    (seen,) = backend.observe([handle])
    assert (seen.status, seen.reason, seen.pod_name) == ("starting", "ContainerCreating", POD)

    set_status(core, running(ready=False))
    assert backend.observe([handle])[0].status == "starting"

    set_status(core, running(ready=True))
    assert backend.observe([handle]) == [
        Observation(7, "ready", port=8000, pod_name=POD, gpu_uuids=(uuid,))
    ]


def test_a_copy_without_pod_or_deployment_is_gone(backend, cluster):
    assert backend.observe([CopyHandle(99)]) == [Observation(99, "gone")]


UNSCHEDULABLE = (
    "0/7 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/7 nodes are "
    "available: 1 No preemption victims found for incoming pod."
)
FAILURES = {
    "oom killed": (
        {"phase": "Failed", "containerStatuses": [
            engine_status(state={"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
        ]},
        ("exited", "OOMKilled", 137, ""),
    ),
    "crash loop": (
        {"phase": "Running", "containerStatuses": [engine_status(
            state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
            last_state={"terminated": {"exitCode": 1, "reason": "Error"}}, restarts=3,
        )]},
        ("exited", "CrashLoopBackOff", 1, "back-off 40s"),
    ),
    "crash loop after an oom kill": (
        {"phase": "Running", "containerStatuses": [engine_status(
            state={"waiting": {"reason": "CrashLoopBackOff"}},
            last_state={"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, restarts=2,
        )]},
        ("exited", "OOMKilled", 137, "restarted 2 times"),
    ),
    "unschedulable": (
        {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": UNSCHEDULABLE}]},
        ("unschedulable", "Unschedulable", None, UNSCHEDULABLE),
    ),
    "image pull backoff": (
        {"phase": "Pending", "containerStatuses": [engine_status(
            state={"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}
        )]},
        ("waiting", "ImagePullBackOff", None, "Back-off pulling"),
    ),
    "error pulling the image": (
        {"phase": "Pending", "containerStatuses": [engine_status(
            state={"waiting": {"reason": "ErrImagePull", "message": "not found"}}
        )]},
        ("waiting", "ErrImagePull", None, "not found"),
    ),
    "evicted": (
        {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."},
        ("exited", "Evicted", None, "The node was low on memory."),
    ),
}  # fmt: skip


@pytest.mark.parametrize("status, expected", FAILURES.values(), ids=FAILURES.keys())
def test_pod_failures_map_to_a_status_and_reason(backend, cluster, apps, core, status, expected):
    handle = backend.launch(copy_spec())
    start_pod(apps, core)
    set_status(core, status)

    (seen,) = backend.observe([handle])

    assert (seen.status, seen.reason, seen.exit_code, seen.message) == expected


GONE = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "code": 410,
        "reason": "Expired",
        "message": "too old resource version: 12 (345)",
    },
}


def test_the_pod_watch_lists_again_after_410_gone_and_carries_on(
    backend, cluster, kube, apps, core
):
    handle = backend.launch(copy_spec())
    start_pod(apps, core)
    kube.call(lambda: kube.k["watch v1/pods"][:1] << (GONE,))
    seen: list[Observation] = []
    stop = threading.Event()
    watcher = threading.Thread(target=backend.watch_pods, args=(seen.append, stop), daemon=True)
    watcher.start()
    try:
        wait_until(lambda: kube.count("watch v1/pods") >= 2)
        assert kube.count("list v1/pods") == 2  # the first list, and the one after the 410

        set_status(core, running(ready=True))
        wait_until(lambda: seen[-1].status == "ready")

        backend.stop(handle)
        core.delete_namespaced_pod(POD, NAMESPACE)
        wait_until(lambda: seen[-1].status == "gone")
    finally:
        stop.set()
        watcher.join(5)

    assert not watcher.is_alive()
    # Each change is passed on once, however often kmock replays the pod as ADDED.
    assert [(o.status, o.reason) for o in seen] == [
        ("starting", "ContainerCreating"),
        ("ready", ""),
        ("gone", ""),
    ]


def test_watch_failures_are_logged_without_the_token(caplog):
    backend = KubernetesBackend(kubeconfig(f"http://127.0.0.1:{closed_port()}"), NAMESPACE)
    stop = threading.Event()
    watcher = threading.Thread(
        target=backend.watch_pods, args=(lambda observation: None, stop), daemon=True
    )
    watcher.start()
    try:
        wait_until(lambda: "Watching pods in berth failed" in caplog.text)
    finally:
        stop.set()
        watcher.join(5)
        backend.close()

    assert "the connection was refused" in caplog.text
    assert TOKEN not in caplog.text


# --- logs and metrics --------------------------------------------------------------------------

ENGINE_LOG = (
    b"2025-11-29T15:00:00.100000000Z (APIServer pid=1) INFO 11-29 15:00:00 [api_server.py:1839] "
    b"vLLM API server version 0.11.0\n",
    b"2025-11-29T15:00:05.250000000Z (EngineCore_DP0 pid=80) WARNING 11-29 15:00:05 "
    b"[config.py:120] Your device does not support fp8\n",
    b"2025-11-29T15:00:09.000000000Z (EngineCore_DP0 pid=80) ERROR 11-29 15:00:09 [core.py:708] "
    b"EngineCore failed to start.\n",
    b"2025-11-29T15:00:09.000100000Z Traceback (most recent call last):\n",
    b"2025-11-29T15:00:09.000200000Z torch.OutOfMemoryError: CUDA out of memory.\n",
    b"2025-11-29T15:00:10.000000000Z INFO:     Shutting down\n",
    b"2025-11-29T15:00:11.000000000Z \x1b[1;36m(APIServer pid=1)\x1b[0;0m DEBUG 11-29 15:00:11 "
    b"[launcher.py:29] bye\n",
)
LOG_REQUEST = ("get", kmock.subresource("log"), kmock.name(POD))


def at(seconds: float) -> datetime:
    return datetime(2025, 11, 29, 15, 0, 0, tzinfo=UTC) + timedelta(seconds=seconds)


def test_logs_carry_the_engines_levels_and_skip_lines_before_since(
    backend, cluster, kube, apps, core
):
    handle = backend.launch(copy_spec())
    start_pod(apps, core)
    kube.script(LOG_REQUEST, {"Content-Type": "text/plain"}, ENGINE_LOG)

    records = backend.logs(handle, since=at(1))

    assert [(r.level, r.at) for r in records] == [
        ("WARNING", at(5.25)),
        ("ERROR", at(9)),
        ("ERROR", at(9.0001)),  # a traceback's lines keep the level of the line before
        ("ERROR", at(9.0002)),
        ("INFO", at(10)),
        ("DEBUG", at(11)),
    ]
    assert records[1] == LogRecord(
        7,
        "engine",
        "ERROR",
        at(9),
        "(EngineCore_DP0 pid=80) ERROR 11-29 15:00:09 [core.py:708] EngineCore failed to start.",
        "gpu-h100-a",
    )
    assert records[-1].text.startswith("(APIServer pid=1) DEBUG")  # colour codes removed
    params = kube.call(lambda: kube.k[LOG_REQUEST][-1].params)
    assert (params["container"], params["timestamps"].lower()) == ("vllm", "true")
    assert int(params["sinceSeconds"]) > 0


def test_follow_logs_passes_each_line_on_as_the_engine_prints_it(
    backend, cluster, kube, apps, core
):
    handle = backend.launch(copy_spec())
    start_pod(apps, core)
    kube.script(LOG_REQUEST, {"Content-Type": "text/plain"}, (ENGINE_LOG[0], ...))
    records: list[LogRecord] = []
    follower = threading.Thread(
        target=backend.follow_logs, args=(handle, records.append, threading.Event()), daemon=True
    )
    follower.start()

    wait_until(lambda: len(records) == 1)
    kube.call(lambda: kube.k[LOG_REQUEST][...] << ENGINE_LOG[1] << ...)
    wait_until(lambda: len(records) == 2)
    kube.call(lambda: kube.k[LOG_REQUEST][...] << ENGINE_LOG[2])  # no `...`: the stream ends
    follower.join(5)

    assert not follower.is_alive()
    assert [r.level for r in records] == ["INFO", "WARNING", "ERROR"]
    assert kube.call(lambda: kube.k[LOG_REQUEST][-1].params["follow"].lower()) == "true"


METRICS = (
    b"# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="qwen-chat"} 2.0\n'
    b"# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
    b"# TYPE vllm:prompt_tokens_total counter\n"
    b'vllm:prompt_tokens_total{model_name="qwen-chat"} 1234.0\n'
)


def test_metrics_are_read_through_the_api_server_proxy(backend, cluster, kube):
    backend.launch(copy_spec())
    pod_path = f"get /api/v1/namespaces/berth/pods/{POD}:8000/proxy/metrics"
    service_path = "get /api/v1/namespaces/berth/services/qwen-chat-0:8000/proxy/metrics"
    kube.script(pod_path, {"Content-Type": "text/plain"}, METRICS)
    kube.script(service_path, {"Content-Type": "text/plain"}, METRICS)

    through_pod = backend.metrics(CopyHandle(7, pod_name=POD, port=8000))
    through_service = backend.metrics(CopyHandle(7, port=8000))

    assert through_pod == [
        MetricSample("vllm:num_requests_running", {"model_name": "qwen-chat"}, 2.0),
        MetricSample("vllm:prompt_tokens_total", {"model_name": "qwen-chat"}, 1234.0),
    ]
    assert through_service == through_pod


def test_metrics_of_an_engine_that_does_not_answer_are_empty(backend, cluster, kube):
    backend.launch(copy_spec())
    kube.script("get /api/v1/namespaces/berth/services/qwen-chat-0:8000/proxy/metrics", 503)

    assert backend.metrics(CopyHandle(7, port=8000)) == []
    assert backend.metrics(CopyHandle(42, port=8000)) == []  # no such copy


# --- kubeconfigs and connection tests ----------------------------------------------------------


def kubeconfig_with(**changes: object) -> str:
    document = yaml.safe_load(kubeconfig("https://gpu.example.com:6443"))
    for key, value in changes.items():
        if value is None:
            document.pop(key.replace("_", "-"), None)
        else:
            document[key.replace("_", "-")] = value
    return yaml.safe_dump(document)


def user_with(**fields: object) -> list[dict]:
    return [{"name": "berth", "user": {"token": TOKEN, **fields}}]


BAD_KUBECONFIGS = {
    "not yaml": (
        f"clusters:\n- name: gpu\n  token: {TOKEN}\n   bad: [",
        f"The kubeconfig is not valid YAML (line 4, column 7). {FLATTEN}",
    ),
    "not a mapping": (
        f"- {TOKEN}\n",
        "The text is not a kubeconfig: expected a YAML mapping with clusters, contexts, users "
        f"and current-context. {FLATTEN}",
    ),
    "no clusters": (
        kubeconfig_with(clusters=None),
        "The kubeconfig has no clusters: a kubeconfig needs at least one named entry under "
        f"each of clusters, contexts and users. {FLATTEN}",
    ),
    "no users": (
        kubeconfig_with(users=[]),
        "The kubeconfig has no users: a kubeconfig needs at least one named entry under each "
        f"of clusters, contexts and users. {FLATTEN}",
    ),
    "no contexts": (
        kubeconfig_with(contexts=None),
        "The kubeconfig has no contexts: a kubeconfig needs at least one named entry under "
        f"each of clusters, contexts and users. {FLATTEN}",
    ),
    "no current context": (
        kubeconfig_with(current_context=None),
        "The kubeconfig has no current-context, so it does not say which cluster to use. Run "
        "`kubectl config use-context <name>` before exporting it, or add a current-context line.",
    ),
    "unknown current context": (
        kubeconfig_with(current_context="prod"),
        'The kubeconfig\'s current-context "prod" is not one of its contexts (gpu).',
    ),
    "a file on another machine": (
        kubeconfig_with(users=user_with(**{"client-key": "/home/me/.minikube/client.key"})),
        'The kubeconfig\'s user "berth" refers to a file (client-key) on the machine it was '
        f"written on, which this server does not have. {FLATTEN}",
    ),
    "an exec plugin": (
        kubeconfig_with(users=user_with(exec={"command": "aws", "args": ["eks", "get-token"]})),
        'User "berth" gets its credentials from a program (exec), which this console does not '
        "run. Use a service account token instead: create a service account, bind it to a role, "
        "and put `token: <token>` under the user.",
    ),
}


@pytest.mark.parametrize("text, message", BAD_KUBECONFIGS.values(), ids=BAD_KUBECONFIGS.keys())
def test_a_malformed_kubeconfig_is_explained(text, message):
    assert kubernetes_backend.validate_kubeconfig(text) == message
    assert kubernetes_backend.test_connection(text, NAMESPACE) == ConnectionCheck(False, message)
    with pytest.raises(BackendError) as refused:
        KubernetesBackend(text, NAMESPACE)
    assert str(refused.value) == message
    assert TOKEN not in message


def test_an_unreachable_api_server_is_explained_within_seconds():
    port = closed_port()
    started = time.monotonic()

    check = kubernetes_backend.test_connection(kubeconfig(f"http://127.0.0.1:{port}"), NAMESPACE)

    assert time.monotonic() - started < 5
    assert check == ConnectionCheck(
        False,
        f"Cannot reach the Kubernetes API server at http://127.0.0.1:{port}: the connection was "
        "refused. Check the server address in the kubeconfig and that this console's network "
        "can reach it (firewall, VPN, private endpoint).",
    )


RIGHTS = (
    "Berth needs get, list and watch on nodes and pods in all namespaces, and in namespace "
    '"berth" also pods/log, pods/proxy, services/proxy, get on persistentvolumeclaims, create, '
    "get, list and delete on deployments, services and jobs, and create, patch and delete on "
    "secrets. Ask the cluster's admin for a ClusterRole and bindings with these rights, or use a "
    "kubeconfig of a user that has them."
)


def forbidden(message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=403, reason="Forbidden", message=message)


def test_a_kubeconfig_that_may_not_list_nodes_is_explained(kube):
    said = 'nodes is forbidden: User "system:serviceaccount:berth:reader" cannot list resource'
    kube.script("list v1/nodes", forbidden(said))

    check = kubernetes_backend.test_connection(kubeconfig(kube.url), NAMESPACE)

    assert check == ConnectionCheck(
        False,
        f"The kubeconfig's user may not list nodes (403 Forbidden). {RIGHTS} "
        f'The server said: "{said}"',
    )


def test_a_kubeconfig_that_may_not_list_pods_in_the_namespace_is_explained(kube, core):
    core.create_node(h100_node())
    kube.script("list v1/pods", forbidden("pods is forbidden"))

    check = kubernetes_backend.test_connection(kubeconfig(kube.url), NAMESPACE)

    assert not check.ok
    assert check.message.startswith(
        'The kubeconfig\'s user may not list pods in namespace "berth" (403 Forbidden).'
    )


def test_a_server_that_echoes_the_credentials_never_gets_them_into_a_message(kube):
    echo = f"invalid bearer token {TOKEN} for CA {CA_DATA}"
    kube.script(
        "list v1/nodes", kmock.KubernetesError(status=401, reason="Unauthorized", message=echo)
    )

    check = kubernetes_backend.test_connection(kubeconfig(kube.url), NAMESPACE)

    assert check.message == (
        "The API server rejected the kubeconfig's credentials (401 Unauthorized): the token or "
        "client certificate is wrong or has expired. Export a fresh kubeconfig or create a new "
        'service account token. The server said: "invalid bearer token [redacted] for CA '
        '[redacted]"'
    )


def test_a_working_kubeconfig_passes_the_connection_test(kube, core):
    core.create_node(h100_node())
    core.create_node(cpu_node())

    check = kubernetes_backend.test_connection(kubeconfig(kube.url), NAMESPACE)

    assert check == ConnectionCheck(
        True,
        f'Connected to {kube.url}: 2 nodes, 1 with GPUs; pods in namespace "berth" can be read.',
    )


# --- model files: the Job that fills the model cache ------------------------------------------

QWEN_FILES = ModelFiles(
    "Qwen/Qwen2.5-0.5B-Instruct",
    "7ae557604adf67be50417f59c2c2f167def9a775",
    "bf16",
    size_bytes=988_097_824,
    files=(("config.json", 659), ("model.safetensors", 988_097_536)),
)


def claim(core: client.CoreV1Api, *modes: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "berth-model-cache", "namespace": NAMESPACE},
        "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": "500Gi"}}},
    }
    core.create_namespaced_persistent_volume_claim(NAMESPACE, body)


def jobs(batch: client.BatchV1Api) -> list[dict]:
    listed = raw(batch.list_namespaced_job(NAMESPACE, _preload_content=False))
    return listed["items"]


def finish_job(batch: client.BatchV1Api, name: str, status: dict, after_s: float = 0.3) -> None:
    """The Job controller's part: after a while, the Job's status says how it ended."""

    def later() -> None:
        time.sleep(after_s)
        batch.patch_namespaced_job_status(name, NAMESPACE, {"status": status})

    threading.Thread(target=later, daemon=True).start()


JOB_FAILED = {
    "failed": 3,
    "conditions": [
        {
            "type": "Failed",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        }
    ],
}


@pytest.fixture
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


@pytest.fixture
def quick(kube: KmockServer) -> Iterator[KubernetesBackend]:
    text = kubeconfig(kube.url)
    with KubernetesBackend(text, NAMESPACE, IMAGE, fill_poll_s=0.05, fill_timeout_s=5) as backend:
        yield backend


def test_without_shared_storage_a_job_per_node_fills_its_own_cache(quick, cluster, batch):
    name = fill_job_name(QWEN_FILES, "gpu-h100-a")
    assert jobs(batch) == []
    finish_job(batch, name, {"succeeded": 1})
    seen: list[int] = []
    result = quick.prepare_files("gpu-h100-a", QWEN_FILES, seen.append)
    assert result.present and name in result.message
    assert seen[-1] == QWEN_FILES.size_bytes
    (job,) = jobs(batch)
    assert job["metadata"]["name"] == name and job["spec"]["backoffLimit"] == 2
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-h100-a"}
    assert pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [
        {
            "name": "model-cache",
            "hostPath": {"path": "/var/lib/berth/model-cache", "type": "DirectoryOrCreate"},
        }
    ]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    # An argument list: the program is fixed, the repository, commit and files are arguments.
    assert container["command"][:2] == ["python3", "-c"]
    assert "snapshot_download" in container["command"][2]
    assert container["command"][3:] == [QWEN_FILES.repo_id, QWEN_FILES.revision]
    assert container["args"] == ["config.json", "model.safetensors"]
    assert container["volumeMounts"] == [
        {"name": "model-cache", "mountPath": "/root/.cache/huggingface"}
    ]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "berth-hf-token", "key": "token", "optional": True}}} in container["env"]  # fmt: skip
    # Filled once: the next copy on this node finds the files at once, another node gets its own.
    assert quick.prepare_files("gpu-h100-a", QWEN_FILES).present and len(jobs(batch)) == 1
    finish_job(batch, fill_job_name(QWEN_FILES, "gpu-h100-b"), {"succeeded": 1})
    assert quick.prepare_files("gpu-h100-b", QWEN_FILES).present and len(jobs(batch)) == 2


def test_with_a_shared_claim_one_job_fills_the_cache_for_every_node(quick, cluster, core, batch):
    claim(core, "ReadWriteMany")
    name = fill_job_name(QWEN_FILES, None)
    finish_job(batch, name, {"succeeded": 1})
    assert quick.prepare_files("gpu-h100-a", QWEN_FILES).present
    (job,) = jobs(batch)
    pod = job["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod
    assert pod["volumes"] == [
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": "berth-model-cache"}}
    ]
    # The same cache on every node: another node's copy finds the files filled already.
    assert quick.prepare_files("gpu-h100-b", QWEN_FILES).present and len(jobs(batch)) == 1
    quick.launch(copy_spec())
    engine = raw(client.AppsV1Api(quick.api).read_namespaced_deployment(
        "qwen-chat-0", NAMESPACE, _preload_content=False))  # fmt: skip
    volumes = engine["spec"]["template"]["spec"]["volumes"]
    assert volumes[0] == {
        "name": "model-cache",
        "persistentVolumeClaim": {"claimName": "berth-model-cache"},
    }


def test_a_claim_one_node_at_a_time_can_mount_is_not_shared_storage(quick, cluster, core, batch):
    claim(core, "ReadWriteOnce")
    finish_job(batch, fill_job_name(QWEN_FILES, "gpu-h100-a"), {"succeeded": 1})
    assert quick.prepare_files("gpu-h100-a", QWEN_FILES).present
    (job,) = jobs(batch)
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {
        "kubernetes.io/hostname": "gpu-h100-a"
    }


def test_a_failed_fill_says_why_and_the_next_attempt_replaces_the_job(quick, cluster, batch):
    name = fill_job_name(QWEN_FILES, "gpu-h100-a")
    finish_job(batch, name, JOB_FAILED)
    with pytest.raises(BackendError) as failed:
        quick.prepare_files("gpu-h100-a", QWEN_FILES)
    words = str(failed.value)
    assert "BackoffLimitExceeded" in words and f"logs job/{name}" in words
    finish_job(batch, name, {"succeeded": 1}, after_s=0.5)
    assert quick.prepare_files("gpu-h100-a", QWEN_FILES).present
    (job,) = jobs(batch)
    assert job["status"] == {"succeeded": 1}


def test_a_fill_that_never_ends_is_given_up_with_words(kube, cluster):
    text = kubeconfig(kube.url)
    with KubernetesBackend(text, NAMESPACE, IMAGE, fill_poll_s=0.05, fill_timeout_s=0.3) as slow:
        with pytest.raises(BackendError, match="has not filled the model cache on gpu-h100-a"):
            slow.prepare_files("gpu-h100-a", QWEN_FILES)


def secret_token(core: client.CoreV1Api, name: str) -> str | None:
    try:
        found = raw(core.read_namespaced_secret(name, NAMESPACE, _preload_content=False))
    except client.ApiException as error:
        assert error.status == 404
        return None
    return found.get("stringData", {}).get("token")  # kmock keeps the body as it was sent


def test_a_teams_token_reaches_its_fill_job_and_its_pods_only(quick, cluster, core, batch, apps):
    files = replace(QWEN_FILES, token_owner="red", token="hf_red_secret_1")
    finish_job(batch, fill_job_name(files, "gpu-h100-a"), {"succeeded": 1})
    result = quick.prepare_files("gpu-h100-a", files)
    assert result.present and "hf_red_secret_1" not in result.message
    assert secret_token(core, "berth-hf-token-red") == "hf_red_secret_1"
    (job,) = jobs(batch)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    token_ref = {"name": "berth-hf-token-red", "key": "token", "optional": True}
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": token_ref}} in container["env"]
    assert "hf_red_secret_1" not in str(job)  # the Job names the Secret, never the token

    quick.launch(copy_spec(token_owner="red"))
    engine = raw(apps.read_namespaced_deployment("qwen-chat-0", NAMESPACE, _preload_content=False))
    (engine_container,) = engine["spec"]["template"]["spec"]["containers"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": token_ref}} in engine_container["env"]

    # A new token replaces the old one; a team that removed its token has no Secret any more.
    quick.prepare_files("gpu-h100-a", replace(files, token="hf_red_secret_2"))
    assert secret_token(core, "berth-hf-token-red") == "hf_red_secret_2"
    quick.prepare_files("gpu-h100-a", replace(files, token=""))
    assert secret_token(core, "berth-hf-token-red") is None


def test_a_secret_that_cannot_be_written_says_so_without_the_token(quick, cluster, kube):
    said = 'secrets is forbidden: User "berth" cannot create resource "secrets"'
    kube.script("create v1/secrets", forbidden(said))
    files = replace(QWEN_FILES, token_owner="red", token="hf_red_secret_3")
    with pytest.raises(BackendError) as refused:
        quick.prepare_files("gpu-h100-a", files)
    assert "write the Secret berth-hf-token-red" in str(refused.value)
    assert "hf_red_secret_3" not in str(refused.value)


def test_the_fill_reports_the_bytes_its_pod_printed(quick, cluster, core, batch, kube):
    name = fill_job_name(QWEN_FILES, "gpu-h100-a")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fill-pod-1", "namespace": NAMESPACE, "labels": {"job-name": name}},
        "spec": {"containers": [{"name": "fill", "image": IMAGE}]},
    }
    core.create_namespaced_pod(NAMESPACE, pod)
    printed = b"berth-bytes 0\nberth-bytes 524288000\n"
    kube.script(("get", kmock.subresource("log"), kmock.name("fill-pod-1")), printed)
    finish_job(batch, name, {"succeeded": 1}, after_s=0.5)
    seen: list[int] = []
    assert quick.prepare_files("gpu-h100-a", QWEN_FILES, seen.append).present
    assert 524_288_000 in seen and seen[-1] == QWEN_FILES.size_bytes


def test_the_fill_jobs_program_fetches_exactly_the_files_at_the_commit(tmp_path):
    """The Job's own command line, run here against the emulated hub (as its pod would run it
    against Hugging Face): the chosen files at the pinned commit land in the cache."""
    import subprocess
    import sys

    from tests.hub import running_hub, safetensors_repo

    with running_hub() as hub:
        repo = hub.add(safetensors_repo("acme/filled", megabytes=2))
        sha = repo.refs["main"]
        files = ModelFiles(
            "acme/filled", sha, "bf16", files=(("config.json", 1), ("model.safetensors", 1))
        )
        job = build_fill_job(files, "gpu-h100-a", NAMESPACE, ManifestSettings(image=IMAGE))
        (container,) = job["spec"]["template"]["spec"]["containers"]
        argv = [sys.executable, *container["command"][1:], *container["args"]]
        env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url, "PATH": "/usr/bin:/bin"}
        ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert bytes_reported(ran.stdout) is not None and "model cache filled" in ran.stdout
    snapshot = tmp_path / "hf" / "hub" / "models--acme--filled" / "snapshots" / sha
    assert sorted(p.name for p in snapshot.iterdir()) == ["config.json", "model.safetensors"]


def test_gated_and_own_code_models_are_cached_per_team(quick, cluster, core, batch):
    claim(core, "ReadWriteMany")
    red_files = replace(QWEN_FILES, token_owner="red", cache_owner="red")
    blue_files = replace(red_files, token_owner="blue", cache_owner="blue")
    names = {fill_job_name(f, None) for f in (QWEN_FILES, red_files, blue_files)}
    assert len(names) == 3  # one fill per team: another team's fill is not this team's
    for files in (red_files, blue_files):
        finish_job(batch, fill_job_name(files, None), {"succeeded": 1})
        assert quick.prepare_files("gpu-h100-a", files).present
    written = {
        job["metadata"]["name"]: job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        for job in jobs(batch)
    }
    assert written[fill_job_name(red_files, None)] == [
        {"name": "model-cache", "mountPath": "/root/.cache/huggingface", "subPath": "teams/red"}
    ]
    quick.launch(copy_spec(cache_owner="red", token_owner="red"))
    engine = raw(client.AppsV1Api(quick.api).read_namespaced_deployment(
        "qwen-chat-0", NAMESPACE, _preload_content=False))  # fmt: skip
    mounts = engine["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    # The team's own cache is all its pod sees, read-only: not the shared hub, not blue's.
    assert mounts[0] == {
        "name": "model-cache",
        "readOnly": True,
        "mountPath": "/root/.cache/huggingface",
        "subPath": "teams/red",
    }

"""kmock as a real API server in a background thread, and the cluster objects the tests use.

The nodes are shaped like real ones: the H100 labels are the GPU-Operator dump quoted in
reference/gpu-clusters.md §1.2; the others follow GFD's, the device plugin's and AMD's labeller's
documented labels. Pods are made the way a Deployment's controller would make them (kmock runs no
controllers), from the pod template Berth wrote, and their status is patched as a kubelet would.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import operator
import socket
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import aiohttp.test_utils
import kmock
import yaml
from kubernetes import client

NAMESPACE = "berth"
TOKEN = "berth-test-token-3f9a1c7e5d2b"
CA_DATA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot a real CA\n").decode()
IMAGE = "vllm/vllm-openai:v0.11.0"
GIB, MIB = 2**30, 2**20


# --- the emulator ------------------------------------------------------------------------------


def lowercase_watch(handler: Callable[..., Any]) -> Callable[..., Any]:
    """kubernetes 34 sends `watch=True`; a real API server reads that as true, kmock 0.8 only
    recognises `watch=true` (it would answer a LIST). Normalise it on the way in."""

    async def handle(request: Any) -> Any:
        if request.query.get("watch") == "True":
            request = request.clone(rel_url=request.rel_url.update_query(watch="true"))
        return await handler(request)

    return handle


class LowercaseWatchServer(aiohttp.test_utils.RawTestServer):
    def __init__(self, handler: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(lowercase_watch(handler), **kwargs)


class KmockServer:
    """kmock's KubernetesEmulator on 127.0.0.1, on its own event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self.main(),))
        self.thread.daemon = True
        self.url = ""

    async def main(self) -> None:
        self.stopping = asyncio.Event()
        async with (
            kmock.KubernetesEmulator() as self.k,
            kmock.Server(self.k, server_cls=LowercaseWatchServer) as server,
        ):
            self.url = str(server.url)
            self.ready.set()
            await self.stopping.wait()
            # Open watch and log streams never end by themselves; without this, stop() hangs.
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

    def start(self) -> KmockServer:
        self.thread.start()
        assert self.ready.wait(10), "kmock did not start"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # importlib.resources in kmock
            self.call(self.k.resources.load_bundled)
        return self

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the emulator's loop: kmock may only be touched from there."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def script(self, criteria: Any, *payloads: Any) -> None:
        """Make the emulator answer requests matching `criteria` with `payloads`."""

        self.call(lambda: functools.reduce(operator.lshift, payloads, self.k[criteria]))

    def count(self, criteria: Any) -> int:
        return self.call(lambda: len(self.k[criteria]))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)


def kubeconfig(server: str, token: str = TOKEN, **top: Any) -> str:
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "gpu", "cluster": {"server": server, "certificate-authority-data": CA_DATA}}
        ],
        "users": [{"name": "berth", "user": {"token": token}}],
        "contexts": [{"name": "gpu", "context": {"cluster": "gpu", "user": "berth"}}],
        "current-context": "gpu",
    }
    document.update(top)
    return yaml.safe_dump(document)


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"not true within {timeout} s")


def raw(response: Any) -> dict[str, Any]:
    """The JSON an API call returned (called with _preload_content=False)."""
    return json.loads(response.data)


# --- nodes -------------------------------------------------------------------------------------


def node(
    name: str,
    labels: dict[str, str],
    allocatable: dict[str, str],
    ready: bool = True,
) -> dict[str, Any]:
    base_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    resources = {"cpu": "64", "memory": "515543004Ki", "pods": "110", **allocatable}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**base_labels, **labels}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


# The real label dump of a GPU-Operator node with 2 x H100 (reference §1.2).
H100_LABELS = {
    "nvidia.com/cuda.driver-version.full": "550.90.07",
    "nvidia.com/cuda.runtime-version.full": "12.4",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.mode": "compute",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/mps.capable": "false",
    "nvidia.com/vgpu.present": "false",
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.driver": "pre-installed",
}


def h100_node(name: str = "gpu-h100-a", ready: bool = True) -> dict[str, Any]:
    return node(name, H100_LABELS, {"nvidia.com/gpu": "2"}, ready)


def h200_mig_mixed_node(name: str = "gpu-h200-mig") -> dict[str, Any]:
    """One H200 in the mig-parted `all-balanced` layout: 2 x 1g.18gb, 2g.35gb, 3g.71gb."""
    labels = {
        **{k: v for k, v in H100_LABELS.items() if "mig" not in k},
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.memory": "143771",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "all-balanced",
        "nvidia.com/mig-1g.18gb.count": "2",
        "nvidia.com/mig-1g.18gb.memory": "16384",
        "nvidia.com/mig-2g.35gb.count": "1",
        "nvidia.com/mig-2g.35gb.memory": "33280",
        "nvidia.com/mig-3g.71gb.count": "1",
        "nvidia.com/mig-3g.71gb.memory": "69888",
    }
    allocatable = {
        "nvidia.com/mig-1g.18gb": "2",
        "nvidia.com/mig-2g.35gb": "1",
        "nvidia.com/mig-3g.71gb": "1",
    }
    return node(name, labels, allocatable)


def l40s_time_sliced_node(name: str = "gpu-l40s-ts") -> dict[str, Any]:
    """2 x L40S, time-slicing with 4 replicas and renameByDefault=false (product gets -SHARED)."""
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-L40S-SHARED",
        "nvidia.com/gpu.memory": "46068",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "9",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "107",
        "nvidia.com/cuda.driver.rev": "02",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/mig.strategy": "none",
    }
    return node(name, labels, {"nvidia.com/gpu": "8"})


def a100_mps_node(name: str = "gpu-a100-mps") -> dict[str, Any]:
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.memory": "40960",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": "10",
        "nvidia.com/gpu.sharing-strategy": "mps",
        "nvidia.com/mps.capable": "true",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
    }
    return node(name, labels, {"nvidia.com/gpu": "10"})


def mi210_node(name: str = "gpu-mi210") -> dict[str, Any]:
    labels = {
        "feature.node.kubernetes.io/amd-gpu": "true",
        "amd.com/gpu.product-name": "Instinct_MI210",
        "amd.com/gpu.vram": "64G",
        "amd.com/gpu.cu-count": "104",
        "amd.com/gpu.device-id": "740f",
        "amd.com/gpu.family": "AI",
        "amd.com/gpu.driver-version": "6.10.5",
    }
    return node(name, labels, {"amd.com/gpu": "2"})


def unlabelled_gpu_node(name: str = "gpu-new") -> dict[str, Any]:
    """A node whose device plugin runs but whose GPU Feature Discovery has not labelled it."""
    return node(name, {}, {"nvidia.com/gpu": "4"})


def cpu_node(name: str = "control-plane") -> dict[str, Any]:
    return node(name, {"node-role.kubernetes.io/control-plane": ""}, {})


# --- pods --------------------------------------------------------------------------------------


def workload_pod(
    name: str, namespace: str, node_name: str, resources: dict[str, str], phase: str = "Running"
) -> dict[str, Any]:
    """A pod that is not Berth's (a notebook, a training job) holding GPU resources."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {"name": "main", "image": "pytorch/pytorch", "resources": {"limits": resources}}
            ],
        },
        "status": {"phase": phase},
    }


def engine_status(
    ready: bool = False,
    state: dict[str, Any] | None = None,
    last_state: dict[str, Any] | None = None,
    restarts: int = 0,
) -> dict[str, Any]:
    return {
        "name": "vllm",
        "image": IMAGE,
        "imageID": "",
        "ready": ready,
        "restartCount": restarts,
        "state": state or {"waiting": {"reason": "ContainerCreating"}},
        "lastState": last_state or {},
    }


def pod_of_deployment(
    apps: client.AppsV1Api, deployment: str, pod_name: str, node_name: str
) -> dict[str, Any]:
    """The pod the Deployment's controller would create from Berth's pod template."""
    template = raw(apps.read_namespaced_deployment(deployment, NAMESPACE, _preload_content=False))[
        "spec"
    ]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": NAMESPACE,
            "labels": template["metadata"]["labels"],
        },
        "spec": {**template["spec"], "nodeName": node_name},
        "status": {"phase": "Pending", "containerStatuses": [engine_status()]},
    }


def running(ready: bool) -> dict[str, Any]:
    started = {"running": {"startedAt": "2025-11-29T15:00:00Z"}}
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": [engine_status(ready=ready, state=started)],
    }

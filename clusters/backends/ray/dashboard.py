"""A Ray cluster as Ray tells it: connected to as Ray's drivers connect (the address ray.init
takes), then read through its dashboard with Ray's own client (ray.util.state) and the
dashboard's HTTP API, never by parsing `ray status` text. A cluster that requires a token gets
it as RAY_AUTH_TOKEN in a driver's environment and `Authorization: Bearer …` over HTTP, never
on a command line or in a record.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from clusters.backends.base import (
    NOTICE_PARTIAL_DISCOVERY,
    DiscoveredAccelerator,
    DiscoveredMachine,
    Discovery,
)

PROJECT_ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30
ACCELERATOR_TYPE = "accelerator_type:"  # Ray's resource naming a node's GPU model
RAY_VERSION = "2.60.0"  # the version berth[ray] installs
INSTALL = (
    'Ray clusters need Ray in the console\'s environment: pip install "berth[ray]" '
    f"(Ray {RAY_VERSION}), then restart the console."
)
LARGEST_GPU_GIB = 1024
# What a GPU can run (bf16, fp8…) follows its compute capability, which Ray does not report:
# known from the accelerator types Ray names (ray.util.accelerators), by the start of the name.
COMPUTE_CAPABILITY = {
    "B200": "10.0",
    "H200": "9.0",
    "H100": "9.0",
    "H20": "9.0",
    "GH200": "9.0",
    "L40S": "8.9",
    "L40": "8.9",
    "L4": "8.9",
    "A100": "8.0",
    "A800": "8.0",
    "A10G": "8.6",
    "A40": "8.6",
    "A30": "8.0",
    "A10": "8.6",
    "T4": "7.5",
    "V100": "7.0",
}


class RayNotInstalled(RuntimeError):
    def __init__(self) -> None:
        super().__init__(INSTALL)


@dataclass(frozen=True)
class RayCheck:
    """Whether Berth can work with the Ray cluster at an address, and what it found there."""

    ok: bool
    message: str
    ray_version: str = ""
    python_version: str = ""
    nodes: int = 0
    dashboard_url: str = ""


def local_ray_version() -> str:
    try:
        import ray
    except ImportError as missing:
        raise RayNotInstalled() from missing
    return str(ray.__version__)


def address_problem(address: str) -> str | None:
    """None for a Ray address Berth can connect to (as ray.init takes it), else what is wrong."""
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in text or " " in text:
        return (
            f"{address!r} is not a Ray address: give the head's address as ray.init takes it, "
            "HEAD:6379 (or ray://HEAD:10001 for Ray Client)"
        )
    return None


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def cluster_metadata(address: str, token: str, timeout: float) -> dict[str, Any]:
    """The cluster's Ray and Python versions, as its dashboard reports them."""
    url = f"{address.rstrip('/')}/api/v0/cluster_metadata"
    reply = httpx.get(url, headers=headers(token), timeout=timeout)
    if reply.status_code in (401, 403):
        raise PermissionError(
            "the Ray cluster refused the token: give the cluster's token (RAY_AUTH_TOKEN on "
            "its side)"
            if token
            else "the Ray cluster requires a token: give one"
        )
    reply.raise_for_status()
    data: dict[str, Any] = reply.json().get("data") or {}
    return data


def version_mismatch(cluster_ray: str, cluster_python: str) -> str | None:
    """Ray's client and the cluster must run the same Ray, and the same Python minor version."""
    here_ray = local_ray_version()
    here_python = ".".join(map(str, sys.version_info[:2]))
    if cluster_ray != here_ray:
        return (
            f"the cluster runs Ray {cluster_ray} and this console Ray {here_ray}: Ray's client "
            f"needs the same version on both sides. Run Ray {here_ray} on the cluster, or "
            f"install ray=={cluster_ray} beside the console"
        )
    if ".".join(cluster_python.split(".")[:2]) != here_python:
        return (
            f"the cluster runs Python {cluster_python} and this console Python {here_python}: "
            "Ray needs the same Python minor version on both sides"
        )
    return None


def alive_nodes(address: str, token: str, timeout: float) -> list[Any]:
    from ray.util.state.api import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource

    client = StateApiClient(
        address=address, headers={"Content-Type": "application/json", **headers(token)}
    )
    options = ListApiOptions(detail=True, timeout=int(max(timeout, 1)))
    nodes = client.list(StateResource.NODES, options=options, raise_on_missing_output=False)
    return [node for node in nodes if node.state == "ALIVE"]


def nothing_answers(address: str) -> str | None:
    """Ray's own connect waits minutes for a head that is not there: a quick look first."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3).close()
    except OSError as error:
        return f"nothing answers at {address}: {error.strerror or error}. Is the head running?"
    return None


TOKEN_REFUSED = (
    "the Ray cluster requires a token and refused the one given (or none was): give the "
    "cluster's token (RAY_AUTH_TOKEN on its side)"
)


def token_env(token: str) -> dict[str, str]:
    """A driver's environment for a cluster's token: Ray's client sends it only in token mode.
    In the environment, never on the command line."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token} if token else {}


def probe(address: str, token: str, timeout: float) -> dict[str, Any]:
    """Connect as Ray's drivers do, in a process of its own (Ray binds a process to one
    cluster): the versions, the dashboard's address, the nodes; or Ray's words why not."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **token_env(token)}
    argv = [sys.executable, "-m", "clusters.backends.ray.driver", "probe", address]
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=PROJECT_ROOT
        )
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {timeout:g} s"}
    if "InvalidAuthToken" in done.stderr:  # Ray retries, then says only that it failed
        return {"error": TOKEN_REFUSED}
    lines = done.stdout.strip().splitlines()
    try:
        return dict(json.loads(lines[-1]))
    except (IndexError, ValueError):
        return {"error": (done.stderr.strip().splitlines() or ["no answer"])[-1]}


def check_cluster(address: str, token: str = "", timeout: float = 60) -> RayCheck:
    """Connect, read the versions (a mismatch is refused), list the nodes, find the dashboard
    (Ray's state and log APIs, which Berth reads)."""
    local_ray_version()  # RayNotInstalled, said as such by the caller
    problem = address_problem(address)
    if problem:
        return RayCheck(False, problem)
    unreachable = nothing_answers(address)
    if unreachable:
        return RayCheck(False, unreachable)
    found = probe(address, token, timeout)
    if "error" in found:
        return RayCheck(False, f"cannot connect to the Ray cluster at {address}: {found['error']}")
    dashboard = str(found.get("dashboard_url") or "")
    if not dashboard:
        return RayCheck(False, "the Ray cluster runs no dashboard: start it with the dashboard")
    try:
        metadata = cluster_metadata(dashboard, token, timeout=10)
        nodes = alive_nodes(dashboard, token, timeout=10)
    except PermissionError as refused:
        return RayCheck(False, str(refused))
    except Exception as error:  # reachable by Ray's protocol, not over HTTP: said as it is
        return RayCheck(False, f"cannot read the Ray dashboard at {dashboard}: {error}")
    cluster_ray = str(metadata.get("rayVersion", "?"))
    cluster_python = str(metadata.get("pythonVersion", "?"))
    mismatch = version_mismatch(cluster_ray, cluster_python)
    if mismatch:
        return RayCheck(False, mismatch, cluster_ray, cluster_python, len(nodes))
    gpus = sum(gpu_count(node) for node in nodes)
    return RayCheck(
        True,
        f"Connected: Ray {cluster_ray} on Python {cluster_python}, {len(nodes)} nodes alive "
        f"with {gpus} GPUs.",
        cluster_ray,
        cluster_python,
        len(nodes),
        dashboard,
    )


def gpu_count(node: Any) -> int:
    return int((node.resources_total or {}).get("GPU", 0))


def accelerator_type(node: Any) -> str:
    names = [k for k in (node.resources_total or {}) if k.startswith(ACCELERATOR_TYPE)]
    return names[0][len(ACCELERATOR_TYPE) :] if names else ""


def machine_name(node: Any) -> str:
    """Unique within the cluster (several nodes may share an address) and stable while the
    node lives: its address and the start of Ray's node id."""
    return f"{node.node_ip}-{node.node_id[:8]}"


def node_address(machine: str) -> str:
    """The node's address, from its machine name (machine_name): where its copies listen."""
    return machine.rsplit("-", 1)[0]


def discover(
    address: str,
    token: str,
    gpu_memory_gib: Mapping[str, float],
    measured: Mapping[str, Mapping[str, Any]] | None = None,
) -> Discovery:
    """The alive nodes that have GPUs, with each GPU's memory as NVML measured it on the node
    (`measured`, by node id: the driver's "gpus"), else as the admin declared it for the node's
    accelerator type. A node whose GPU memory is known neither way receives no placement, and
    the message says why and which type to declare."""
    try:
        nodes = alive_nodes(address, token, timeout=10)
    except Exception as error:
        return Discovery((), message=f"Ray's dashboard at {address}: {error}", reachable=False)
    machines, unknown = [], {}
    for node in nodes:
        gpus = gpu_count(node)
        if not gpus:
            continue  # the head, CPU-only nodes: no GPU to place on
        kind = accelerator_type(node)
        found = (measured or {}).get(node.node_id) or {}
        memory = gpu_memory_bytes(found, gpu_memory_gib.get(kind))
        if memory is None:
            unknown.setdefault(kind or "(none declared by the node)", found.get("error", ""))
        machines.append(machine_of(node, gpus, kind, memory))
    message = f"{len(machines)} Ray nodes with GPUs."
    notices: tuple[str, ...] = ()
    if unknown:
        notices = (NOTICE_PARTIAL_DISCOVERY,)
        message += f" {unknown_memory_words(unknown)}"
    return Discovery(tuple(machines), notices, message)


def gpu_memory_bytes(measured: Mapping[str, Any], declared_gib: float | None) -> int | None:
    """A node's GPU memory: the smallest of its GPUs as NVML measured them (Ray, not Berth,
    picks which of the node's GPUs a copy gets), else the memory declared for its type."""
    devices = measured.get("devices") or []
    if devices:
        return min(int(device["memory_bytes"]) for device in devices)
    return int(declared_gib * GIB) if declared_gib is not None else None


def unknown_memory_words(unknown: Mapping[str, str]) -> str:
    """Which accelerator types have nodes of unknown GPU memory, NVML's words where it said
    why, and how to declare it."""
    why = next((error for error in unknown.values() if error), "")
    measured = f" (NVML on their nodes: {why})" if why else " (not measured yet)"
    return (
        f"GPU memory unknown for accelerator type {', '.join(sorted(unknown))}{measured}: those "
        "nodes get no copies. Declare it per type (admin, or addcluster --gpu-memory TYPE=GiB)."
    )


def machine_of(node: Any, gpus: int, kind: str, memory_bytes: int | None) -> DiscoveredMachine:
    resources = node.resources_total or {}
    accelerators = tuple(
        DiscoveredAccelerator(
            index=index,
            vendor="nvidia",
            product=kind or "unknown",
            memory_bytes=memory_bytes or 0,
            uuid=f"ray-{node.node_id[:16]}-{index}",
            compute_capability=compute_capability(kind),
            sharing_class="shared",
        )
        for index in range(gpus)
    )
    return DiscoveredMachine(
        name=machine_name(node),
        labels=dict(node.labels or {}),
        cpu_count=int(resources.get("CPU", 0)),
        system_memory_bytes=int(resources.get("memory", 0)),
        accelerators=accelerators,
        capacity_known=memory_bytes is not None,
    )


def compute_capability(kind: str) -> str:
    """The longest known name the type starts with (A100-80G is an A100, L40S not an L4)."""
    known = [name for name in COMPUTE_CAPABILITY if kind.upper().startswith(name)]
    return COMPUTE_CAPABILITY[max(known, key=len)] if known else ""


def parse_gpu_memory(pairs: list[str]) -> dict[str, float]:
    """TYPE=GiB pairs (the addcluster option), refused in words when malformed."""
    declared: dict[str, float] = {}
    for pair in pairs:
        kind, sep, gib = pair.partition("=")
        try:
            value = float(gib)
        except ValueError:
            value = -1.0
        if not sep or not kind.strip() or not 0 < value <= LARGEST_GPU_GIB:
            raise ValueError(
                f"{pair!r} is not TYPE=GiB: give the accelerator type as Ray names it and the "
                f"GPU memory in GiB (above 0, at most {LARGEST_GPU_GIB}), e.g. H100=80"
            )
        declared[kind.strip()] = value
    return declared

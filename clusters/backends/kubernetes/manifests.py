"""CopySpec → the Deployment and Service of one copy, as the JSON bodies the API server takes.

Pure functions, so the manifest of every kind of copy is checked without a cluster. The shape
follows the reference manifest (reference/gpu-clusters.md §2.2): the vllm/vllm-openai image,
`vllm serve` with the copy's argv as args, one GPU resource, /dev/shm in memory, the Hugging Face
cache on a volume, HF_TOKEN from a Secret, the copy's engine key from a Secret of its own (never
in the args or the Deployment), and readiness on /health.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusters.backends.argv import flag_value, with_flag
from clusters.backends.base import BackendError, CopySpec
from clusters.backends.kubernetes.discovery import (
    AMD_GPU,
    BERTH,
    MANAGED_BY,
    MIG_PREFIX,
    NVIDIA_GPU,
    NVIDIA_SHARED_GPU,
    units,
)

DEFAULT_ENGINE_IMAGE = "vllm/vllm-openai:v0.11.0"
DEFAULT_PORT = 8000
ENGINE_CONTAINER = "vllm"
ENGINE_COMMAND = ("vllm", "serve")
COPY_ID_LABEL = "berth.io/copy-id"
INSTALL_LABEL = "berth.io/install"
DEPLOYMENT_LABEL = "berth.io/deployment"
ORDINAL_LABEL = "berth.io/ordinal"
INSTANCE_LABEL = "app.kubernetes.io/instance"
HOSTNAME_LABEL = "kubernetes.io/hostname"
HF_CACHE = "/root/.cache/huggingface"
TEAM_CACHES = "teams"  # beside the shared "hub" in the cache volume: teams/<team>/hub/…
# The device plugin chooses the GPUs and sets these itself; a value rendered for another kind of
# machine (standalone pins GPU indexes) would hide the GPUs the pod was given.
DEVICE_SELECTION_ENV = {
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
}


@dataclass(frozen=True)
class ManifestSettings:
    """What a cluster's admin may choose about the pods Berth creates."""

    image: str = DEFAULT_ENGINE_IMAGE
    # A claim every node can mount (ReadWriteMany) holds one cache for all; "" → each node keeps
    # its own cache in node_cache_path (the backend decides from the namespace's claims).
    model_cache_claim: str = "berth-model-cache"
    node_cache_path: str = "/var/lib/berth/model-cache"
    hf_token_secret: str = "berth-hf-token"
    hf_token_key: str = "token"
    shm_size: str = "2Gi"
    # Besides Berth's gateway and console pods, who may reach an engine's port: the API
    # server's addresses (the watcher reads /metrics through its proxy), as CIDRs.
    engine_client_cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineArgs:
    args: tuple[str, ...]
    port: int


# --- names and labels --------------------------------------------------------------------------


def object_name(deployment_name: str, ordinal: int) -> str:
    """The copy's Deployment and Service name: a DNS-1035 label (a Service name must be one)."""
    base = re.sub(r"[^a-z0-9-]+", "-", deployment_name.lower()).strip("-") or "copy"
    if not base[0].isalpha():
        base = f"berth-{base}"
    suffix = f"-{ordinal}"
    if len(base) + len(suffix) <= 63:
        return base + suffix
    # Cut names keep a digest of the whole, so two long names that share a prefix stay apart.
    digest = hashlib.sha256(deployment_name.encode()).hexdigest()[:6]
    return f"{base[: 63 - len(suffix) - 7].rstrip('-')}-{digest}{suffix}"


def label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return value.strip("-_.")


def copy_labels(spec: CopySpec, name: str) -> dict[str, str]:
    return {
        MANAGED_BY: BERTH,
        "app.kubernetes.io/name": "vllm",
        INSTANCE_LABEL: name,
        COPY_ID_LABEL: str(spec.copy_id),
        DEPLOYMENT_LABEL: label_value(spec.deployment_name),
        ORDINAL_LABEL: str(spec.ordinal),
        **({INSTALL_LABEL: label_value(spec.install_id)} if spec.install_id else {}),
    }


def copy_selector(copy_id: int) -> dict[str, str]:
    return {MANAGED_BY: BERTH, COPY_ID_LABEL: str(copy_id)}


# --- the engine's command line -----------------------------------------------------------------


def engine_args(argv: Sequence[str], default_port: int) -> EngineArgs:
    """The container's args: the argv after `vllm serve`, listening on the pod's address."""
    args = list(argv)
    if tuple(args[:2]) == ENGINE_COMMAND:
        args = args[2:]
    if args and args[0] in ("llama-server", "vllm"):
        raise BackendError(
            f"The Kubernetes backend runs vLLM (`vllm serve`); it cannot start `{args[0]}`."
        )
    port_text = flag_value(args, "--port")
    port = int(port_text) if port_text and port_text.isdigit() else default_port
    # In a pod, 127.0.0.1 would hide the engine from the readiness probe and the Service.
    args = with_flag(args, "--host", "0.0.0.0")
    if port_text is None:
        args += ["--port", str(port)]
    return EngineArgs(tuple(args), port)


# --- resources ---------------------------------------------------------------------------------


def gpu_request(spec: CopySpec, allocatable: Mapping[str, str]) -> dict[str, str]:
    """The one GPU resource the copy asks for, named as this node's device plugin names it."""
    count = str(max(1, len(spec.gpu_indexes)))
    if spec.mig_profile:
        mig = MIG_PREFIX + spec.mig_profile.replace("+", ".")
        # MIG "single" advertises the slices as nvidia.com/gpu; "mixed" under their profile.
        return {mig if mig in allocatable else NVIDIA_GPU: "1"}
    for resource in (NVIDIA_SHARED_GPU, NVIDIA_GPU, AMD_GPU):
        if resource in allocatable:
            return {resource: count}
    if any(units(v) for name, v in allocatable.items() if name.startswith(MIG_PREFIX)):
        raise BackendError(
            f'Node "{spec.machine}" offers only MIG slices; this copy names no MIG profile.'
        )
    raise BackendError(f'Node "{spec.machine}" advertises no GPU resource Berth can ask for.')


def container_env(spec: CopySpec, settings: ManifestSettings) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": name, "value": str(value)}
        for name, value in sorted(spec.env.items())
        if name not in DEVICE_SELECTION_ENV
    ]
    if "HF_TOKEN" not in spec.env:
        env.extend(hf_token_env(settings))
    return env + engine_key_env(spec)


def engine_key_secret_name(spec: CopySpec) -> str:
    return f"{object_name(spec.deployment_name, spec.ordinal)}-engine-key"


def engine_key_env(spec: CopySpec) -> list[dict[str, Any]]:
    """The copy's secret variables (its engine key), read from its own Secret."""
    secret = engine_key_secret_name(spec)
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}}
        for name in sorted(spec.secret_env)
    ]


def build_engine_key_secret(spec: CopySpec, namespace: str) -> dict[str, Any]:
    """The Secret that holds the copy's engine key, labelled as the copy's like its pods."""
    name = engine_key_secret_name(spec)
    labels = copy_labels(spec, object_name(spec.deployment_name, spec.ordinal))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "stringData": dict(spec.secret_env),
    }


def token_secret_name(owner: str, settings: ManifestSettings) -> str:
    """Each team's Hugging Face token in its own Secret: one team's pods never get another's."""
    return f"{settings.hf_token_secret}-{owner}" if owner else settings.hf_token_secret


def hf_token_env(settings: ManifestSettings) -> list[dict[str, Any]]:
    """HF_TOKEN from the namespace's Secret, when it has one (gated models need it)."""
    if not settings.hf_token_secret:
        return []
    secret = {"name": settings.hf_token_secret, "key": settings.hf_token_key, "optional": True}
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": secret}}]


def cache_volume(settings: ManifestSettings) -> dict[str, Any]:
    """The Hugging Face cache: the shared claim, or the node's own directory."""
    if settings.model_cache_claim:
        return {"persistentVolumeClaim": {"claimName": settings.model_cache_claim}}
    return {"hostPath": {"path": settings.node_cache_path, "type": "DirectoryOrCreate"}}


def team_cache(owner: str) -> str:
    """A team's own part of the cache volume (team names are slugs, safe as a path)."""
    return f"{TEAM_CACHES}/{owner}"


def engine_cache_mount(spec: CopySpec) -> dict[str, Any]:
    """Read-only: only the fill Jobs write the cache, so an engine (or a model's own code)
    cannot rewrite another team's weights, templates or code. A team's own cache is all such a
    pod sees; a shared model's pod sees only the shared hub, not the teams' caches beside it."""
    if spec.cache_owner:
        return {
            "name": "model-cache", "mountPath": HF_CACHE, "subPath": team_cache(spec.cache_owner),
            "readOnly": True,
        }  # fmt: skip
    return {
        "name": "model-cache",
        "mountPath": f"{HF_CACHE}/hub",
        "subPath": "hub",
        "readOnly": True,
    }


def volumes(settings: ManifestSettings) -> list[dict[str, Any]]:
    # NCCL and vLLM's workers exchange tensors through /dev/shm; the container default is 64 MiB.
    shm = {"emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}}
    return [{"name": "model-cache", **cache_volume(settings)}, {"name": "shm", **shm}]


def engine_container(
    spec: CopySpec, engine: EngineArgs, gpus: Mapping[str, str], settings: ManifestSettings
) -> dict[str, Any]:
    return {
        "name": ENGINE_CONTAINER,
        "image": settings.image,
        "command": list(ENGINE_COMMAND),
        "args": list(engine.args),
        "ports": [{"name": "http", "containerPort": engine.port}],
        "env": container_env(spec, settings),
        # Extended resources must have requests equal to limits.
        "resources": {"requests": dict(gpus), "limits": dict(gpus)},
        "volumeMounts": [engine_cache_mount(spec), {"name": "shm", "mountPath": "/dev/shm"}],
        # Readiness only: a liveness probe would restart an engine that is still loading a large
        # model; a copy that never becomes ready is reaped by Berth's startup deadline instead.
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": engine.port},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
    }


def pod_spec(
    spec: CopySpec, engine: EngineArgs, node: Mapping[str, Any], settings: ManifestSettings
) -> dict[str, Any]:
    gpus = gpu_request(spec, node["allocatable"])
    hostname = node["labels"].get(HOSTNAME_LABEL, spec.machine)
    return {
        # Placement chose the node; the hostname label is what a nodeSelector can match.
        "nodeSelector": {HOSTNAME_LABEL: hostname},
        # GPU nodes are often tainted with their resource name so that only GPU pods land there.
        "tolerations": [{"key": name, "operator": "Exists"} for name in sorted(gpus)],
        # Service links would add VLLM_*_PORT variables, which vLLM reads as its own settings.
        "enableServiceLinks": False,
        # An engine has no business with the Kubernetes API: no token to steal.
        "automountServiceAccountToken": False,
        "containers": [engine_container(spec, engine, gpus, settings)],
        "volumes": volumes(settings),
    }


def build_deployment(
    spec: CopySpec, node: Mapping[str, Any], namespace: str, settings: ManifestSettings
) -> dict[str, Any]:
    """The copy's Deployment. `node` is {"labels": …, "allocatable": …} of spec.machine."""
    name = object_name(spec.deployment_name, spec.ordinal)
    labels = copy_labels(spec, name)
    engine = engine_args(spec.argv, spec.port or DEFAULT_PORT)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"berth.io/machine": spec.machine},
        },
        "spec": {
            "replicas": 1,
            # A rolling update would start the new pod while the old one still holds the GPU.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": copy_selector(spec.copy_id)},
            "template": {
                "metadata": {"labels": labels},
                "spec": pod_spec(spec, engine, node, settings),
            },
        },
    }


# The labels Berth's own pods carry (its Helm chart and manifests set them).
BERTH_PART_OF = {"app.kubernetes.io/part-of": BERTH}
ENGINE_CLIENTS = ("gateway", "console")


def network_policy_name(spec: CopySpec) -> str:
    return f"{object_name(spec.deployment_name, spec.ordinal)}-engine"


def engine_clients(settings: ManifestSettings) -> list[dict[str, Any]]:
    """Who may reach an engine: Berth's gateway and console pods in any namespace, and the
    addresses the cluster's admin names."""
    component = {
        "key": "app.kubernetes.io/component",
        "operator": "In",
        "values": list(ENGINE_CLIENTS),
    }
    berth_pods = {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": dict(BERTH_PART_OF), "matchExpressions": [component]},
    }
    return [berth_pods] + [{"ipBlock": {"cidr": cidr}} for cidr in settings.engine_client_cidrs]


def build_network_policy(
    spec: CopySpec, namespace: str, settings: ManifestSettings
) -> dict[str, Any]:
    """Only Berth reaches the copy's engine port; nothing else in the cluster (another team's
    engine included) does."""
    name = object_name(spec.deployment_name, spec.ordinal)
    port = engine_args(spec.argv, spec.port or DEFAULT_PORT).port
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": network_policy_name(spec),
            "namespace": namespace,
            "labels": copy_labels(spec, name),
        },
        "spec": {
            "podSelector": {"matchLabels": copy_selector(spec.copy_id)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": engine_clients(settings), "ports": [{"protocol": "TCP", "port": port}]}
            ],
        },
    }


def build_service(spec: CopySpec, namespace: str) -> dict[str, Any]:
    name = object_name(spec.deployment_name, spec.ordinal)
    port = engine_args(spec.argv, spec.port or DEFAULT_PORT).port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": copy_labels(spec, name)},
        "spec": {
            "selector": copy_selector(spec.copy_id),
            "ports": [{"name": "http", "port": port, "targetPort": port}],
        },
    }

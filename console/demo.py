"""The demo: users, a team, a simulated cluster, this machine as the cluster `local`, and a few
models on this server (make_tiny_model adds a real one that `local` can host)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from catalog.loader import load_catalog
from catalog.models import ServerModel, ServerModelState, Variant
from clusters.backends.simulator import discover_inventory
from clusters.inventory import apply_discovery
from clusters.models import Cluster, ClusterKind, SharingStrategy, Topology
from clusters.registry import backend_for
from console.demo_passwords import DEMO_USERS
from console.models import Membership, Role, Team

H100 = {
    "vendor": "nvidia",
    "product": "NVIDIA-H100-80GB-HBM3",
    "memory_mib": 81559,
    "compute_capability": "9.0",
    "driver": "550.90.07",
    "cuda": "12.4",
}
H200 = {
    "vendor": "nvidia",
    "product": "NVIDIA-H200",
    "memory_mib": 143771,
    "compute_capability": "9.0",
    "driver": "550.90.07",
    "cuda": "12.4",
}
L4 = {
    "vendor": "nvidia",
    "product": "NVIDIA-L4",
    "memory_mib": 23034,
    "compute_capability": "8.9",
    "driver": "550.90.07",
    "cuda": "12.4",
}
# MIG slice sizes as the device reports them (MiB), for the H200's all-balanced layout.
H200_MIG = [
    {"profile": "3g.71gb", "memory_mib": 71424},
    {"profile": "2g.35gb", "memory_mib": 35584},
    {"profile": "1g.18gb", "memory_mib": 16384},
    {"profile": "1g.18gb", "memory_mib": 16384},
]

DEMO_MACHINES: list[dict[str, Any]] = [
    *[
        {
            "name": f"h100-{n}",
            "cpus": 96,
            "system_memory_gib": 1024,
            "accelerators": [
                {**H100, "index": i, "uuid": f"GPU-demo-h100-{n}-{i}"} for i in range(4)
            ],
        }
        for n in (1, 2)
    ],
    {
        "name": "h200-mig",
        "cpus": 64,
        "system_memory_gib": 1024,
        "accelerators": [{**H200, "index": 0, "uuid": "GPU-demo-h200-0", "mig": H200_MIG}],
    },
    {
        "name": "l4-shared",
        "cpus": 32,
        "system_memory_gib": 256,
        "accelerators": [
            {**L4, "index": i, "uuid": f"GPU-demo-l4-{i}", "sharing": "time_sliced", "replicas": 4}
            for i in range(2)
        ],
    },
]

ON_THIS_SERVER = [
    ("Qwen/Qwen3-0.6B", "bf16"),
    ("Qwen/Qwen3-8B", "bf16"),
    ("meta-llama/Llama-3.1-8B-Instruct", "bf16"),
    ("Qwen/Qwen3-8B", "gguf-q4_k_m"),
]


def seed_users(team: Team) -> None:
    users = get_user_model().objects
    for username, password, role in DEMO_USERS:
        user, created = users.get_or_create(username=username)
        if created:
            user.set_password(password)
        user.is_staff = user.is_superuser = role == Role.ADMIN
        user.save()
        Membership.objects.update_or_create(user=user, team=team, defaults={"role": role})


def seed_cluster() -> Cluster:
    cluster, _ = Cluster.objects.update_or_create(
        name="demo",
        defaults={
            "description": "Simulated: 2 × 4 H100, an H200 split by MIG, 2 L4 time-sliced.",
            "kind": ClusterKind.SIMULATOR,
            "topology": Topology.MANAGED,
            "sharing_strategy": SharingStrategy.FRACTIONAL,
            "simulated_inventory": {"machines": DEMO_MACHINES},
        },
    )
    apply_discovery(cluster, discover_inventory({"machines": DEMO_MACHINES}))
    return cluster


def seed_local_cluster() -> Cluster:
    """This machine, with its GPUs, or its CPU when it has none, hosting real engines."""
    cluster, _ = Cluster.objects.update_or_create(
        name="local",
        defaults={
            "description": "This machine: its GPUs, or its CPU; engines from `make engines`.",
            "kind": ClusterKind.STANDALONE,
            "topology": Topology.STANDALONE,
            "sharing_strategy": SharingStrategy.FRACTIONAL,
        },
    )
    apply_discovery(cluster, backend_for(cluster).discover())
    return cluster


def seed_server_models() -> None:
    for repo_id, variant_name in ON_THIS_SERVER:
        variant = Variant.objects.get(model__repo_id=repo_id, name=variant_name)
        ServerModel.objects.get_or_create(
            variant=variant,
            revision="main",
            defaults={
                "path": f"var/models/{repo_id}/{variant_name}",
                "size_bytes": variant.size_bytes,
                "state": ServerModelState.READY,
                "progress_bytes": variant.size_bytes,
            },
        )


def seed_demo() -> None:
    """Create (or bring back) the demo; running it again changes nothing else."""
    with transaction.atomic():
        load_catalog()
        team, _ = Team.objects.get_or_create(name="demo", defaults={"description": "The demo team"})
        seed_users(team)
        seed_cluster()
        seed_local_cluster()
        seed_server_models()

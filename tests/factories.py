"""Plain factory functions for tests: real rows, no magic."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser

from catalog.models import Model, Variant
from clusters.backends.base import DiscoveredMachine, Discovery
from clusters.backends.standalone import cpu_accelerator
from clusters.inventory import apply_discovery
from clusters.models import (
    Accelerator,
    Cluster,
    ClusterKind,
    Machine,
    SharingClass,
    SharingStrategy,
    Topology,
)
from console.models import Membership, Team
from deployments import revisions
from deployments.models import Copy, Deployment

PASSWORD = "correct-horse-battery"


def make_user(username: str, *, staff: bool = False) -> AbstractUser:
    user = get_user_model().objects.create_user(username=username, password=PASSWORD)
    user.is_staff = user.is_superuser = staff
    user.save()
    return user


def make_team(name: str) -> Team:
    return Team.objects.get_or_create(name=name)[0]


def add_member(user: Any, team: Team, role: str) -> Membership:
    return Membership.objects.create(user=user, team=team, role=role)


def make_model(repo_id: str = "Qwen/Qwen3-8B") -> Model:
    model = Model.objects.create(
        repo_id=repo_id,
        name=repo_id.split("/")[-1],
        family="Qwen3",
        layers=36,
        attention_heads=32,
        kv_heads=8,
        head_dim=128,
        hidden_size=4096,
        vocab_size=151936,
        max_context=40960,
        params_total=8_190_000_000,
        params_active=8_190_000_000,
    )
    Variant.objects.create(
        model=model,
        name="bf16",
        precision="bf16",
        format="safetensors",
        repo_id=repo_id,
        size_bytes=16_381_470_720,
        min_compute_capability="8.0",
    )
    return model


def make_cluster(name: str = "lab", gpus: int = 2, sharing: str = "fractional") -> Cluster:
    cluster = Cluster.objects.create(
        name=name, kind=ClusterKind.SIMULATOR, sharing_strategy=sharing
    )
    machine = Machine.objects.create(
        cluster=cluster, name=f"{name}-m1", cpu_count=32, system_memory_bytes=256 * 2**30
    )
    for index in range(gpus):
        Accelerator.objects.create(
            machine=machine,
            index=index,
            product="NVIDIA-H100-80GB-HBM3",
            memory_bytes=81559 * 2**20,
            compute_capability="9.0",
            sharing_class=SharingClass.SHARED,
        )
    return cluster


def make_cpu_cluster(
    name: str = "cpu-box", cores: int = 16, system_gib: int = 32, reserve_gib: int = 8
) -> Cluster:
    """A standalone cluster on a machine without GPUs, written as discovery writes `local`
    (one accelerator of vendor cpu: the system memory less the reserve), with fixed figures."""
    cluster = Cluster.objects.create(
        name=name,
        kind=ClusterKind.STANDALONE,
        topology=Topology.STANDALONE,
        sharing_strategy=SharingStrategy.FRACTIONAL,
    )
    cpu = cpu_accelerator(system_gib * 2**30, reserve_gib * 2**30, cores)
    machine = DiscoveredMachine(
        name=f"{name}-m1",
        cpu_count=cores,
        system_memory_bytes=system_gib * 2**30,
        accelerators=(cpu,),
    )
    apply_discovery(cluster, Discovery(machines=(machine,)))
    return cluster


def make_deployment(
    name: str,
    team: Team,
    *,
    cluster: Cluster | None = None,
    model: Model | None = None,
    **fields: Any,
) -> Deployment:
    model = model or Model.objects.first() or make_model()
    cluster = cluster or Cluster.objects.first() or make_cluster()
    defaults: dict[str, Any] = {
        "accelerators_per_copy": Decimal(1),
        "copies_wanted": 1,
        "variant": model.variants.first(),
    }
    defaults.update(fields)
    made = Deployment.objects.create(name=name, team=team, model=model, cluster=cluster, **defaults)
    revisions.keep(made.pk, None, "Host (made by the tests)")  # as Host keeps its first
    return made


def make_copy(deployment: Deployment, ordinal: int = 0) -> Copy:
    return Copy.objects.create(deployment=deployment, ordinal=ordinal)

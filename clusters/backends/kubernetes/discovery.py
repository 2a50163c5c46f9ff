"""Nodes and pods (client model objects) → Discovery. Pure: no I/O, so every case is a unit.

What a node offers Berth is its `status.allocatable` minus what pods that are not Berth's
request on it; Berth's own pods are left out because Berth counts its use from its reservations
(counting both would take the room twice). The GPUs' facts come from the labels that GPU Feature
Discovery (NVIDIA) or the node labeller (AMD) write; a node with GPU capacity but without those
facts is reported with capacity_known=False and receives no placements.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubernetes.client import V1Container, V1Node, V1Pod
from kubernetes.utils.quantity import parse_quantity

from clusters.backends.base import (
    NOTICE_PARTIAL_DISCOVERY,
    NOTICE_SHARING_NOT_CONFIGURED,
    DiscoveredAccelerator,
    DiscoveredMachine,
    DiscoveredSlice,
    Discovery,
)

MIB = 2**20
NVIDIA_GPU = "nvidia.com/gpu"
NVIDIA_SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
AMD_GPU = "amd.com/gpu"
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/")
MANAGED_BY = "app.kubernetes.io/managed-by"
BERTH = "berth"
FINISHED_PHASES = ("Succeeded", "Failed")
AMD_LABEL_PREFIXES = ("amd.com/gpu.", "beta.amd.com/gpu.")


@dataclass(frozen=True)
class KubernetesMachine(DiscoveredMachine):
    """A node, plus the units of each GPU resource that are free for Berth.

    Kubernetes cannot pin a GPU, so Berth reserves per node and resource; `free_units` is that
    count exactly (accelerators only approximate it where a unit is a share of a GPU).
    """

    free_units: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuFacts:
    vendor: str
    product: str
    memory_bytes: int
    compute_capability: str = ""
    driver_version: str = ""
    cuda_version: str = ""


@dataclass(frozen=True)
class NodeReading:
    machine: KubernetesMachine
    problem: str = ""  # why its discovery is partial, in words


# --- quantities and pods -----------------------------------------------------------------------


def units(quantity: object) -> int:
    """A Kubernetes quantity as a whole number (GPUs are integers; CPUs are floored)."""
    try:
        return int(math.floor(parse_quantity(quantity)))
    except (ValueError, ArithmeticError):
        return 0


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_RESOURCE_PREFIXES)


def is_berth_pod(pod: V1Pod) -> bool:
    labels = (pod.metadata and pod.metadata.labels) or {}
    return labels.get(MANAGED_BY) == BERTH


def is_own_pod(pod: V1Pod, namespace: str | None) -> bool:
    """A pod whose room this cluster's reservations already count. A Berth pod in another
    namespace belongs to another Berth (or another cluster row) and holds room like any other."""
    return is_berth_pod(pod) and (namespace is None or pod.metadata.namespace == namespace)


def container_gpu_requests(container: V1Container) -> Counter[str]:
    # Extended resources may be given as limits only; the request then equals the limit.
    resources = container.resources
    asked = {
        **((resources and resources.limits) or {}),
        **((resources and resources.requests) or {}),
    }
    return Counter({name: units(value) for name, value in asked.items() if is_gpu_resource(name)})


def pod_gpu_requests(pod: V1Pod) -> Counter[str]:
    """What a pod holds: its containers' sum, or its largest init container if that is more."""
    spec = pod.spec
    total: Counter[str] = Counter()
    for container in (spec and spec.containers) or []:
        total.update(container_gpu_requests(container))
    for init in (spec and spec.init_containers) or []:
        for name, value in container_gpu_requests(init).items():
            total[name] = max(total[name], value)
    return total


def holds_resources(pod: V1Pod) -> bool:
    status_phase = pod.status.phase if pod.status else None
    return bool(pod.spec and pod.spec.node_name) and status_phase not in FINISHED_PHASES


def foreign_use(pods: Iterable[V1Pod], namespace: str | None) -> dict[str, Counter[str]]:
    """GPU units held per node by pods that are not Berth's (in `namespace`)."""
    used: dict[str, Counter[str]] = {}
    for pod in pods:
        if holds_resources(pod) and not is_own_pod(pod, namespace):
            used.setdefault(pod.spec.node_name, Counter()).update(pod_gpu_requests(pod))
    return used


def free_units(allocatable: Mapping[str, str], used: Mapping[str, int]) -> dict[str, int]:
    return {
        name: max(0, units(value) - used.get(name, 0))
        for name, value in allocatable.items()
        if is_gpu_resource(name)
    }


# --- GPU facts from labels ---------------------------------------------------------------------


def dotted(labels: Mapping[str, str], *keys: str) -> str:
    """Labels joined with dots ("9", "0" → "9.0"); empty when the first is missing."""
    parts = [labels.get(key, "") for key in keys]
    parts = parts[: parts.index("")] if "" in parts else parts
    return ".".join(parts)


def nvidia_facts(labels: Mapping[str, str]) -> GpuFacts | None:
    product, memory = labels.get("nvidia.com/gpu.product"), labels.get("nvidia.com/gpu.memory")
    if not product or not (memory or "").isdigit():
        return None
    driver = labels.get("nvidia.com/cuda.driver-version.full") or dotted(
        labels,
        "nvidia.com/cuda.driver.major",
        "nvidia.com/cuda.driver.minor",
        "nvidia.com/cuda.driver.rev",
    )
    cuda = labels.get("nvidia.com/cuda.runtime-version.full") or dotted(
        labels, "nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor"
    )
    capability = dotted(labels, "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor")
    # Time-slicing with renameByDefault=false appends -SHARED to the product; the GPU is the same.
    product = product.removesuffix("-SHARED")
    return GpuFacts("nvidia", product, int(memory or 0) * MIB, capability, driver, cuda)


def amd_label(labels: Mapping[str, str], name: str) -> str:
    for prefix in AMD_LABEL_PREFIXES:
        if labels.get(prefix + name):
            return labels[prefix + name]
    # The older labeller writes the value into the key: beta.amd.com/gpu.product-name.MI300X=1
    for key in labels:
        for prefix in AMD_LABEL_PREFIXES:
            if key.startswith(f"{prefix}{name}."):
                return key[len(prefix + name) + 1 :]
    return ""


def size_bytes(text: str) -> int:
    """AMD's vram label ("64G", binary units) in bytes; 0 when it cannot be read."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text or "", re.IGNORECASE)
    if not match:
        return 0
    power = " KMGT".index(match.group(2).upper() or " ")
    return int(float(match.group(1)) * 1024**power)


def amd_facts(labels: Mapping[str, str]) -> GpuFacts | None:
    product, memory = amd_label(labels, "product-name"), size_bytes(amd_label(labels, "vram"))
    if not product or not memory:
        return None
    return GpuFacts("amd", product, memory, driver_version=amd_label(labels, "driver-version"))


# --- accelerators by sharing strategy ----------------------------------------------------------


def gpu(facts: GpuFacts, index: int, **kinds: object) -> DiscoveredAccelerator:
    return DiscoveredAccelerator(
        index=index,
        vendor=facts.vendor,
        product=facts.product,
        memory_bytes=facts.memory_bytes,
        compute_capability=facts.compute_capability,
        driver_version=facts.driver_version,
        cuda_version=facts.cuda_version,
        **kinds,  # type: ignore[arg-type]
    )


def whole_gpus(facts: GpuFacts, count: int, start: int = 0) -> list[DiscoveredAccelerator]:
    return [gpu(facts, start + i, sharing_class="whole_gpu") for i in range(count)]


def replicas_per_gpu(labels: Mapping[str, str], advertised: int) -> int:
    replicas = units(labels.get("nvidia.com/gpu.replicas", "1"))
    if replicas > 1:
        return replicas
    # Older device plugins do not write gpu.replicas; the advertised units per GPU tell it.
    gpus = units(labels.get("nvidia.com/gpu.count", "0"))
    return max(1, advertised // gpus) if gpus else 1


def shared_gpus(
    facts: GpuFacts,
    labels: Mapping[str, str],
    allocatable: Mapping[str, str],
    free: Mapping[str, int],
    sharing_class: str,
) -> list[DiscoveredAccelerator]:
    resource = NVIDIA_SHARED_GPU if NVIDIA_SHARED_GPU in allocatable else NVIDIA_GPU
    replicas = replicas_per_gpu(labels, units(allocatable.get(resource, 0)))
    # Which GPU another workload's share sits on is not visible; counting only GPUs whose shares
    # are all free never budgets memory that a neighbour Berth does not know of may be using.
    count = free.get(resource, 0) // replicas
    return [gpu(facts, i, sharing_class=sharing_class, replicas=replicas) for i in range(count)]


def mig_profiles(free: Mapping[str, int]) -> dict[str, int]:
    return {
        name.removeprefix(MIG_PREFIX): n for name, n in free.items() if name.startswith(MIG_PREFIX)
    }


def mig_slice_memory(labels: Mapping[str, str], profile: str) -> int:
    memory = labels.get(f"{MIG_PREFIX}{profile}.memory", "")
    return int(memory) * MIB if memory.isdigit() else 0


def spread_slices(slices: list[tuple[str, int]], parents: int) -> list[tuple[DiscoveredSlice, ...]]:
    """Deal the node's free slices over its MIG GPUs (labels give counts per node, not per GPU)."""
    dealt: list[list[DiscoveredSlice]] = [[] for _ in range(parents)]
    for position, (profile, memory) in enumerate(slices):
        mine = dealt[position % parents]
        mine.append(DiscoveredSlice(index=len(mine), profile=profile, memory_bytes=memory))
    return [tuple(group) for group in dealt]


def mig_mixed_gpus(
    facts: GpuFacts,
    labels: Mapping[str, str],
    allocatable: Mapping[str, str],
    free: Mapping[str, int],
) -> list[DiscoveredAccelerator]:
    # GPUs with MIG off still advertise nvidia.com/gpu on a mixed node; the rest are MIG GPUs.
    whole = whole_gpus(facts, free.get(NVIDIA_GPU, 0))
    physical = units(labels.get("nvidia.com/gpu.count", "1")) or 1
    parents = max(1, physical - units(allocatable.get(NVIDIA_GPU, 0)))
    slices = [
        (profile, mig_slice_memory(labels, profile))
        for profile, count in sorted(mig_profiles(free).items())
        for _ in range(count)
    ]
    mig = [
        gpu(
            facts,
            len(whole) + i,
            hardware_class="hardware_isolated",
            sharing_class="mig",
            slices=group,
        )
        for i, group in enumerate(spread_slices(slices, parents))
    ]
    return whole + mig


def mig_single_gpus(facts: GpuFacts, free: Mapping[str, int]) -> list[DiscoveredAccelerator]:
    """MIG "single": every nvidia.com/gpu is a MIG device, gpu.memory is the device's memory."""
    product, _, profile = facts.product.partition("-MIG-")
    count = free.get(NVIDIA_GPU, 0)
    if not count:
        return []
    slices = tuple(DiscoveredSlice(i, profile, facts.memory_bytes) for i in range(count))
    # The physical GPUs behind the devices are not visible in labels: one parent holds them all.
    parent = GpuFacts(
        facts.vendor,
        product,
        facts.memory_bytes * count,
        facts.compute_capability,
        facts.driver_version,
        facts.cuda_version,
    )
    return [gpu(parent, 0, hardware_class="hardware_isolated", sharing_class="mig", slices=slices)]


def nvidia_strategy(labels: Mapping[str, str], allocatable: Mapping[str, str]) -> str:
    has_mig_resources = any(name.startswith(MIG_PREFIX) for name in allocatable)
    if labels.get("nvidia.com/mig.strategy") == "mixed" and has_mig_resources:
        return "mig_mixed"
    if "-MIG-" in labels.get("nvidia.com/gpu.product", ""):
        return "mig_single"
    sharing = labels.get("nvidia.com/gpu.sharing-strategy", "")
    if sharing == "mps":
        return "mps"
    shared = NVIDIA_SHARED_GPU in allocatable or units(labels.get("nvidia.com/gpu.replicas", 1)) > 1
    return "time_sliced" if sharing == "time-slicing" or shared else "whole_gpu"


def nvidia_accelerators(
    facts: GpuFacts,
    labels: Mapping[str, str],
    allocatable: Mapping[str, str],
    free: Mapping[str, int],
) -> list[DiscoveredAccelerator]:
    strategy = nvidia_strategy(labels, allocatable)
    if strategy == "mig_mixed":
        return mig_mixed_gpus(facts, labels, allocatable, free)
    if strategy == "mig_single":
        return mig_single_gpus(facts, free)
    if strategy in ("mps", "time_sliced"):
        return shared_gpus(facts, labels, allocatable, free, strategy)
    return whole_gpus(facts, free.get(NVIDIA_GPU, 0))


# --- nodes -------------------------------------------------------------------------------------


def node_is_ready(node: V1Node) -> bool:
    # A cordoned node takes no new pods, so for placement it is as good as not ready.
    if node.spec and node.spec.unschedulable:
        return False
    conditions = (node.status and node.status.conditions) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def has_capacity(allocatable: Mapping[str, str], vendor: str) -> bool:
    prefix = "nvidia.com/" if vendor == "nvidia" else "amd.com/"
    return any(name.startswith(prefix) and units(v) > 0 for name, v in allocatable.items())


def vendor_of(labels: Mapping[str, str], allocatable: Mapping[str, str]) -> str:
    """The node's GPU vendor by labels or capacity: nvidia, amd, or "" for none."""
    if has_capacity(allocatable, "nvidia") or "nvidia.com/gpu.product" in labels:
        return "nvidia"
    if has_capacity(allocatable, "amd") or amd_label(labels, "product-name"):
        return "amd"
    return ""


def accelerators_of(
    vendor: str, labels: Mapping[str, str], allocatable: Mapping[str, str], free: Mapping[str, int]
) -> tuple[list[DiscoveredAccelerator] | None, str]:
    """The node's accelerators, or None and the reason its GPU capacity is not known."""
    facts = nvidia_facts(labels) if vendor == "nvidia" else amd_facts(labels)
    if facts is None:
        wanted = (
            "GPU Feature Discovery labels (nvidia.com/gpu.product, nvidia.com/gpu.memory)"
            if vendor == "nvidia"
            else "AMD node labeller labels (amd.com/gpu.product-name, amd.com/gpu.vram)"
        )
        return None, f"it has GPUs but no {wanted}"
    if not has_capacity(allocatable, vendor):
        return None, (
            f"it is labelled with {facts.product} GPUs but advertises none "
            "(is the device plugin running there?)"
        )
    if vendor == "amd":
        return whole_gpus(facts, free.get(AMD_GPU, 0)), ""
    return nvidia_accelerators(facts, labels, allocatable, free), ""


def read_node(node: V1Node, used: Mapping[str, int]) -> NodeReading:
    name = node.metadata.name
    labels = dict(node.metadata.labels or {})
    allocatable = dict((node.status and node.status.allocatable) or {})
    free = free_units(allocatable, used)
    vendor = vendor_of(labels, allocatable)
    accelerators, problem = (
        accelerators_of(vendor, labels, allocatable, free) if vendor else ([], "")
    )
    machine = KubernetesMachine(
        name=name,
        ready=node_is_ready(node),
        labels=labels,
        cpu_count=units(allocatable.get("cpu", 0)),
        system_memory_bytes=units(allocatable.get("memory", 0)),
        accelerators=tuple(accelerators or ()),
        capacity_known=accelerators is not None,
        free_units=free,
    )
    return NodeReading(machine, f'Node "{name}": {problem}.' if problem else "")


def sharing_configured(machines: Iterable[DiscoveredMachine]) -> bool:
    return any(a.sharing_class != "whole_gpu" for m in machines for a in m.accelerators)


def has_gpus(machines: Iterable[KubernetesMachine]) -> bool:
    return any(
        m.accelerators or not m.capacity_known or any(m.free_units.values()) for m in machines
    )


def discovery_from(
    nodes: Iterable[V1Node],
    pods: Iterable[V1Pod],
    note: str = "",
    namespace: str | None = None,
) -> Discovery:
    """What the cluster offers Berth, whose pods are those in `namespace` (None: any).

    `note` explains anything the caller could not read."""
    used = foreign_use(pods, namespace)
    readings = [read_node(node, used.get(node.metadata.name, Counter())) for node in nodes]
    machines = tuple(reading.machine for reading in readings)
    problems = [reading.problem for reading in readings if reading.problem]
    notices: list[str] = []
    if problems or note:
        notices.append(NOTICE_PARTIAL_DISCOVERY)
    if has_gpus(machines) and not sharing_configured(machines):
        notices.append(NOTICE_SHARING_NOT_CONFIGURED)
        problems.append(
            "No GPU sharing (MIG, time-slicing or MPS) is configured: a copy that asks for part "
            "of a GPU takes a whole one."
        )
    return Discovery(
        machines, tuple(notices), " ".join([summary(machines), *problems, note]).strip()
    )


def summary(machines: tuple[KubernetesMachine, ...]) -> str:
    with_gpus = sum(1 for m in machines if m.accelerators or not m.capacity_known)
    free = sum(len(m.accelerators) for m in machines)
    return f"{len(machines)} nodes, {with_gpus} with GPUs; {free} GPUs free for Berth."

"""Clusters, their machines and their accelerators (with MIG slices as child rows)."""

from __future__ import annotations

import re
from datetime import time

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from console import crypto
from console.choices import Badge, StateChoices, StateField
from console.models import SLUG_PATTERN, slug_validator


class ClusterKind(models.TextChoices):
    SIMULATOR = "simulator", "Simulated"
    STANDALONE = "standalone", "Standalone (this machine)"
    KUBERNETES = "kubernetes", "Kubernetes"
    RAY = "ray", "Ray"


class Topology(models.TextChoices):
    MANAGED = "managed_cluster", "Managed cluster"
    STANDALONE = "standalone_cluster", "Standalone"


class SharingStrategy(models.TextChoices):
    NONE = "", "None (one copy per GPU)"
    FRACTIONAL = "fractional", "Fractional (byte budgets)"
    TIME_SLICING = "time_slicing", "Time-slicing"
    MPS = "mps", "MPS"
    MIG = "mig", "MIG"


class ClusterState(StateChoices):
    CONNECTING = "connecting", Badge.GREY, "Connecting"
    READY = "ready", Badge.GREEN, "Ready"
    DEGRADED = "degraded", Badge.AMBER, "Degraded"
    UNREACHABLE = "unreachable", Badge.RED, "Unreachable"


class Vendor(models.TextChoices):
    NVIDIA = "nvidia", "NVIDIA"
    AMD = "amd", "AMD"
    APPLE = "apple", "Apple"
    CPU = "cpu", "CPU"


class HardwareClass(models.TextChoices):
    HARDWARE_ISOLATED = "hardware_isolated", "Hardware isolated"
    SOFTWARE_SHARED = "software_shared", "Software shared"
    UNIFIED_MEMORY = "unified_memory", "Unified memory"


class SharingClass(models.TextChoices):
    WHOLE_GPU = "whole_gpu", "Whole GPU"
    SHARED = "shared", "Shared (byte budgets)"
    TIME_SLICED = "time_sliced", "Time-sliced"
    MPS = "mps", "MPS"
    MIG = "mig", "MIG slice"
    UNIFIED_MEMORY = "unified_memory", "Unified memory"


WINDOW = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


def parse_window(text: str) -> tuple[time, time]:
    """ "02:00-05:00" → its start and end (an end before the start runs past midnight)."""
    found = WINDOW.match(text.strip())
    if found is None:
        raise ValueError(
            f"{text!r} is not a time window: write it as HH:MM-HH:MM, e.g. 02:00-05:00"
        )
    h1, m1, h2, m2 = map(int, found.groups())
    if (h1, m1) == (h2, m2):
        raise ValueError(f"{text!r} starts and ends at the same time: give a window of time")
    return time(h1, m1), time(h2, m2)


def in_window(text: str, now: time) -> bool:
    start, end = parse_window(text)
    return start <= now < end if start < end else now >= start or now < end


def window_validator(text: str) -> None:
    try:
        parse_window(text)
    except ValueError as bad:
        raise ValidationError(str(bad)) from None


class RepackPolicy(models.TextChoices):
    OFF = "off", "Off: moves only where an operator accepts them"
    ON_REQUEST = "on_request", "On request: move copies to make room without asking"
    CONSOLIDATE = "consolidate", "Consolidate: also pack copies in a window to free whole GPUs"


class Cluster(models.Model):
    """A set of machines Berth places copies on, reached through one backend."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    description = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=16, choices=ClusterKind.choices)
    topology = models.CharField(max_length=24, choices=Topology.choices, default=Topology.MANAGED)
    kubeconfig_encrypted = models.TextField(blank=True, editable=False)
    namespace = models.CharField(max_length=63, blank=True, default="berth")
    # A Ray cluster: its address (as ray.init takes it), its dashboard's (found when checked),
    # its token (encrypted, never shown back), the GPU memory per accelerator type in GiB
    # (Ray does not tell it), and whether its copies run the engine simulator (demos, tests).
    address = models.CharField(max_length=200, blank=True)
    dashboard_url = models.CharField(max_length=200, blank=True, editable=False)
    ray_token_encrypted = models.TextField(blank=True, editable=False)
    gpu_memory_gib = models.JSONField(default=dict, blank=True)
    simulated_engines = models.BooleanField(
        default=False, help_text="Ray: run the engine simulator instead of vLLM (demos, tests)"
    )
    engine_image = models.CharField(max_length=200, blank=True, default="vllm/vllm-openai")
    engine_version = models.CharField(max_length=40, blank=True)
    sharing_strategy = models.CharField(
        max_length=16, choices=SharingStrategy.choices, blank=True, default=SharingStrategy.NONE
    )
    # Re-packing (deployments/moving.py): when copies may be moved to make room, and when and
    # how far the cluster consolidates by itself (a window "HH:MM-HH:MM" in the console's time
    # zone, above a fragmentation in percent, below a load in requests in flight per copy).
    repack_policy = models.CharField(
        max_length=16, choices=RepackPolicy.choices, default=RepackPolicy.OFF
    )
    consolidate_window = models.CharField(
        max_length=11, blank=True, validators=[window_validator], help_text="e.g. 02:00-05:00"
    )
    consolidate_above_percent = models.PositiveSmallIntegerField(
        default=30, validators=[MaxValueValidator(100)], help_text="fragmentation, in percent"
    )
    consolidate_below_load = models.FloatField(
        default=1.0, validators=[MinValueValidator(0)], help_text="requests in flight per copy"
    )
    # The simulator's machines and GPUs, described as data (the simulator backend reads it).
    simulated_inventory = models.JSONField(default=dict, blank=True)
    notices = models.JSONField(default=list, blank=True, editable=False)
    state = StateField(ClusterState, default=ClusterState.CONNECTING, editable=False)
    last_seen = models.DateTimeField(null=True, blank=True, editable=False)
    # What the last discovery said, in words (e.g. "no GPUs found on this machine").
    discovery_message = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(name__regex=SLUG_PATTERN), name="cluster_name_is_slug"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=ClusterKind.values), name="cluster_kind_known"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def set_kubeconfig(self, text: str) -> None:
        self.kubeconfig_encrypted = crypto.encrypt(text) if text else ""

    def kubeconfig(self) -> str:
        return crypto.decrypt(self.kubeconfig_encrypted) if self.kubeconfig_encrypted else ""

    @property
    def has_kubeconfig(self) -> bool:
        return bool(self.kubeconfig_encrypted)

    def set_ray_token(self, token: str) -> None:
        self.ray_token_encrypted = crypto.encrypt(token) if token else ""

    def ray_token(self) -> str:
        return crypto.decrypt(self.ray_token_encrypted) if self.ray_token_encrypted else ""

    @property
    def has_ray_token(self) -> bool:
        return bool(self.ray_token_encrypted)


class Machine(models.Model):
    """One host of a cluster (a Kubernetes node, this machine, or a simulated one)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="machines")
    name = models.CharField(max_length=253)
    ready = models.BooleanField(default=True)
    labels = models.JSONField(default=dict, blank=True)
    cpu_count = models.PositiveIntegerField(default=0)
    system_memory_bytes = models.PositiveBigIntegerField(default=0)
    unified_memory = models.BooleanField(default=False)
    last_seen = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"], name="machine_name_unique_in_cluster"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name}"


class AcceleratorQuerySet(models.QuerySet["Accelerator"]):
    def present(self) -> AcceleratorQuerySet:
        """What discovery still reports (rows it stopped reporting are kept for their
        reservations, and are neither counted nor placed on)."""
        return self.filter(present=True)

    def present_gpus(self) -> AcceleratorQuerySet:
        """Whole GPUs (not MIG slices) discovery still reports: what a cluster counts."""
        return self.filter(parent__isnull=True, present=True)


def present_whole(path: str) -> models.Q:
    """Present whole accelerators (not MIG slices) along `path`, as present_gpus selects."""
    return models.Q(**{f"{path}__parent__isnull": True, f"{path}__present": True})


def present_cpus(path: str) -> models.Q:
    """A CPU machine's one accelerator (vendor cpu: its memory less the reserve), present."""
    return present_whole(path) & models.Q(**{f"{path}__vendor": Vendor.CPU})


def present_gpu_count(path: str = "accelerators") -> models.Count:
    """Annotates the count of present GPUs along `path` (a machine's "accelerators", a
    cluster's "machines__accelerators"): a CPU machine's accelerator is not a GPU."""
    rule = present_whole(path) & ~models.Q(**{f"{path}__vendor": Vendor.CPU})
    return models.Count(path, filter=rule, distinct=True)


def with_counts(clusters: models.QuerySet[Cluster]) -> models.QuerySet[Cluster]:
    """Clusters with how many machines and present GPUs each has (the list sorts by GPUs),
    and their CPU machines: how many, their cores, and the memory they give engines."""
    cpu = present_cpus("machines__accelerators")
    return clusters.annotate(
        machine_count=models.Count("machines", distinct=True),
        gpu_count=present_gpu_count("machines__accelerators"),
        cpu_machine_count=models.Count("machines", filter=cpu, distinct=True),
        # Discovery gives a CPU machine one CPU accelerator, so each is summed once.
        cpu_cores=models.Sum("machines__cpu_count", filter=cpu, default=0),
        cpu_memory_bytes=models.Sum("machines__accelerators__memory_bytes", filter=cpu, default=0),
    )


class Accelerator(models.Model):
    """A GPU as the device reports it; a MIG slice is a child row with its parent GPU."""

    machine = models.ForeignKey(Machine, on_delete=models.CASCADE, related_name="accelerators")
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="slices"
    )
    index = models.PositiveIntegerField()
    uuid = models.CharField(max_length=80, blank=True)
    vendor = models.CharField(max_length=8, choices=Vendor.choices, default=Vendor.NVIDIA)
    product = models.CharField(max_length=100)
    memory_bytes = models.PositiveBigIntegerField()
    compute_capability = models.CharField(max_length=8, blank=True)
    driver_version = models.CharField(max_length=32, blank=True)
    cuda_version = models.CharField(max_length=16, blank=True)
    hardware_class = models.CharField(
        max_length=20, choices=HardwareClass.choices, default=HardwareClass.SOFTWARE_SHARED
    )
    sharing_class = models.CharField(
        max_length=24, choices=SharingClass.choices, default=SharingClass.WHOLE_GPU
    )
    mig_profile = models.CharField(
        max_length=24, blank=True, help_text="e.g. 3g.40gb, for a MIG slice"
    )
    replicas = models.PositiveIntegerField(default=1, help_text="time-slicing or MPS replicas")
    # False once discovery stops reporting it (taken by another workload, removed, MIG
    # re-partitioned). Kept rather than deleted so reservations that point at it survive.
    present = models.BooleanField(default=True)

    objects = AcceleratorQuerySet.as_manager()

    class Meta:
        ordering = ["machine__name", "parent_id", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["machine", "index"],
                condition=models.Q(parent__isnull=True),
                name="gpu_index_unique_on_machine",
            ),
            models.UniqueConstraint(fields=["parent", "index"], name="slice_index_unique_in_gpu"),
            models.CheckConstraint(
                condition=models.Q(replicas__gte=1), name="accelerator_replicas_positive"
            ),
        ]

    def __str__(self) -> str:
        if self.parent_id:
            return (
                f"{self.machine.name} GPU {self.parent.index} slice {self.mig_profile}#{self.index}"
            )
        return f"{self.machine.name} GPU {self.index} ({self.product})"

    @property
    def is_slice(self) -> bool:
        return self.parent_id is not None

    @property
    def is_cpu(self) -> bool:
        """A CPU machine's one accelerator (its memory less the reserve), not a GPU."""
        return self.vendor == Vendor.CPU


class PriceUnit(models.TextChoices):
    GPU_HOUR = "gpu_hour", "per GPU-hour of one product"
    CORE_HOUR = "core_hour", "per CPU core-hour (every CPU machine)"


CURRENCY = re.compile(r"^[A-Z]{3}$")


def products_here() -> list[str]:
    """The GPU products some cluster's accelerators carry (CPU machines are priced per core)."""
    gpus = Accelerator.objects.exclude(vendor=Vendor.CPU).filter(parent__isnull=True)
    return sorted(set(gpus.values_list("product", flat=True)))


class Price(models.Model):
    """What the admin says an hour costs: of one GPU of a product, or of one CPU core."""

    # Cost accrues from the room copies held at these prices (gateway/cost.py); one currency
    # for the install.

    unit = models.CharField(max_length=16, choices=PriceUnit.choices, default=PriceUnit.GPU_HOUR)
    product = models.CharField(
        max_length=100,
        blank=True,
        help_text="the GPU product as its accelerators carry it, e.g. NVIDIA-H100-80GB-HBM3; "
        "blank for the CPU core-hour",
    )
    per_hour = models.DecimalField(max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3, default="USD")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["unit", "product"]
        constraints = [
            models.UniqueConstraint(fields=["unit", "product"], name="one_price_per_product"),
            models.CheckConstraint(condition=models.Q(per_hour__gte=0), name="price_not_negative"),
        ]

    def __str__(self) -> str:
        what = self.product if self.unit == PriceUnit.GPU_HOUR else "CPU core"
        return f"{what}: {self.per_hour} {self.currency} per hour"

    def clean(self) -> None:
        self.product = self.product.strip()
        self.currency = self.currency.strip().upper()
        problems = {
            "per_hour": self.per_hour_problem(),
            "product": self.product_problem(),
            "currency": self.currency_problem(),
        }
        found = {field: words for field, words in problems.items() if words}
        if found:
            raise ValidationError(found)

    def per_hour_problem(self) -> str | None:
        if self.per_hour is not None and self.per_hour < 0:
            return f"a price cannot be negative ({self.per_hour}): give 0 or more, e.g. 2.00"
        return None

    def product_problem(self) -> str | None:
        if self.unit == PriceUnit.CORE_HOUR:
            return (
                "leave the product blank: the core-hour price holds for every CPU machine"
                if (self.product)
                else None
            )
        products = products_here()
        if not self.product:
            return f"name the GPU product; products here: {', '.join(products) or 'none yet'}"
        if self.product not in products:
            return (
                f"no cluster has an accelerator {self.product}; products here: "
                f"{', '.join(products) or 'none yet'}"
            )
        return None

    def currency_problem(self) -> str | None:
        if not CURRENCY.match(self.currency):
            return f"{self.currency!r} is not a currency code: three letters, e.g. USD"
        others = Price.objects.exclude(pk=self.pk).exclude(currency=self.currency)
        other = others.values_list("currency", flat=True).first()
        if other:
            return f"prices here are in {other}: give this one in {other} too (one currency)"
        return None

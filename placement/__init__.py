"""Placement: where the copies of a model go on a cluster's GPUs, and why the rest do not fit.

A pure package: frozen dataclasses in, frozen dataclasses out; no Django, no I/O (except the
`python -m placement` CLI). See placement/README.md.
"""

from placement.estimate import (
    available_kv_bytes,
    estimate_copy,
    kv_cache_size_tokens,
    largest_context,
    requests_at_full_context,
)
from placement.fit import plan
from placement.scenario import ScenarioError
from placement.types import (
    GIB,
    Accelerator,
    ClusterSharing,
    EngineSettings,
    Estimate,
    GpuSharing,
    Inventory,
    Machine,
    MeasuredRuntime,
    MigSlice,
    MlaFacts,
    ModelFacts,
    NoFitReason,
    NotPlaced,
    Placement,
    PlacementRequest,
    PlanResult,
    Policy,
    Reservation,
)

__all__ = [
    "GIB",
    "Accelerator",
    "ClusterSharing",
    "EngineSettings",
    "Estimate",
    "GpuSharing",
    "Inventory",
    "Machine",
    "MeasuredRuntime",
    "MigSlice",
    "MlaFacts",
    "ModelFacts",
    "NoFitReason",
    "NotPlaced",
    "Placement",
    "PlacementRequest",
    "PlanResult",
    "Policy",
    "Reservation",
    "ScenarioError",
    "available_kv_bytes",
    "estimate_copy",
    "kv_cache_size_tokens",
    "largest_context",
    "plan",
    "requests_at_full_context",
]

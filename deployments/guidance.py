"""VRAM guidance on a model's page: what a copy of each variant needs at a few context lengths,
and which of this server's clusters can host it (from the placement services, no writes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from catalog.models import Model, Variant
from clusters.models import Cluster
from deployments.placing import estimate, first_reason, fit_check, placement_request
from placement.words import plural

CONTEXTS = (4096, 32768, 131072)
# The fit check answers for a typical chat context; the wizard lets the operator choose.
FIT_CONTEXT = 8192


@dataclass(frozen=True)
class EstimateAt:
    context: int
    weights_bytes: int
    kv_cache_bytes: int
    activations_bytes: int
    overhead_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class ClusterFit:
    cluster: Cluster
    size: float | None  # accelerators per copy the fit check suggests; None: does not fit
    fit_now: int
    fit_empty: int
    reason: str  # why no copy fits now (or at all), in the placement's words

    @property
    def size_words(self) -> str:
        if self.size is None:
            return "—"
        if self.size < 1:
            return f"{self.size:g} of a GPU"
        return plural(self.size, "GPU", "GPUs")


@dataclass
class VariantGuidance:
    variant: Variant
    estimates: list[EstimateAt] = field(default_factory=list)
    fits: list[ClusterFit] = field(default_factory=list)
    problem: str = ""


def contexts_for(model: Model) -> list[int]:
    shorter = [c for c in CONTEXTS if c < model.max_context]
    return [*shorter, model.max_context]


def estimate_at(model: Model, variant: Variant, context: int) -> EstimateAt:
    parts = estimate(model, variant, {"max_model_len": context})
    return EstimateAt(
        context=context,
        weights_bytes=parts.weights_bytes,
        kv_cache_bytes=parts.kv_cache_bytes,
        activations_bytes=parts.activations_bytes,
        overhead_bytes=parts.overhead_bytes,
        total_bytes=parts.total_bytes,
    )


def cluster_fit(cluster: Cluster, model: Model, variant: Variant, context: int) -> ClusterFit:
    settings = {"max_model_len": context}
    first = fit_check(cluster, placement_request(model, variant, settings, 1, 1))
    size = first.suggested_accelerators_per_copy
    if size is None:
        return ClusterFit(cluster, None, 0, 0, first_reason(first) or "No copy fits.")
    result = first
    if size != 1:
        result = fit_check(cluster, placement_request(model, variant, settings, size, 1))
    reason = first_reason(result) if result.fit_now == 0 else ""
    return ClusterFit(cluster, size, result.fit_now, result.fit_empty, reason)


def for_variant(model: Model, variant: Variant, clusters: list[Cluster]) -> VariantGuidance:
    guidance = VariantGuidance(variant)
    try:
        guidance.estimates = [estimate_at(model, variant, c) for c in contexts_for(model)]
        context = min(FIT_CONTEXT, model.max_context)
        guidance.fits = [cluster_fit(c, model, variant, context) for c in clusters]
    except ValueError as error:  # facts placement refuses (e.g. heads not divisible)
        guidance.problem = str(error)
    return guidance


def for_model(model: Model) -> list[VariantGuidance]:
    clusters = list(Cluster.objects.order_by("name"))
    return [for_variant(model, variant, clusters) for variant in model.variants.all()]

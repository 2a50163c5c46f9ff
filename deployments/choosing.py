"""What Berth chooses when an operator leaves it open: the variant, the cluster, the size of a
copy and the name.

The one home of these defaults, for the wizard's novice mode and the API (and the SDK on it);
each choice says why, in words the page and the API's answer show. A variant already on this
server wins over one that would need a download, among those that run on the cluster and fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from catalog.models import Model, ServerModel, ServerModelState, Variant
from clusters.models import Cluster
from deployments.engine.variant_advice import (
    Advice,
    advise,
    hardware_of,
    pick,
    why_it_cannot_run,
)
from deployments.fit_words import SIZE_CHOICES, size_text
from deployments.models import Deployment
from deployments.placing import first_reason, fit_check, placement_request
from placement.fit import FRACTION_LADDER
from placement.words import gib


@dataclass(frozen=True)
class Choice:
    value: Any
    why: str


def on_this_server(model: Model) -> set[int]:
    """The model's variants whose files this server keeps, ready."""
    ready = ServerModel.objects.filter(variant__model=model, state=ServerModelState.READY)
    return set(ready.values_list("variant_id", flat=True))


def fits_one_copy(advice: Advice) -> bool:
    return advice.runs and advice.accelerators is not None


def variant_for(model: Model, cluster: Cluster) -> Choice:
    """The variant novice mode hosts on the cluster: the best that runs there, or one that also
    runs and fits but is already on this server (nothing to download)."""
    hardware = hardware_of(cluster)
    picked, why = pick(model, hardware)
    if picked is None:
        return Choice(None, why)
    kept = on_this_server(model)
    if picked.pk in kept:
        return Choice(picked, f"{picked.name}: on this server. {why}")
    ready = [advise(model, v, hardware) for v in model.variants.all() if v.pk in kept]
    fitting = [a for a in ready if fits_one_copy(a)]
    if fitting:
        chosen = min(fitting, key=lambda a: (a.accelerators or 0, a.needs_bytes)).variant
        download = gib(picked.size_bytes)
        return Choice(
            chosen,
            f"{chosen.name}: on this server; {picked.name} would need a {download} download.",
        )
    return Choice(picked, f"{why} It is not on this server yet: {gib(picked.size_bytes)} to fetch.")


def size_for(cluster: Cluster, model: Model, variant: Variant, settings: dict[str, Any]) -> Choice:
    """The size of a copy left open: the smallest usual size that holds one copy with its
    context on the cluster, so that a second model hosted the same way can share the machine.
    1 where none does (the fit check then says why)."""
    try:
        result = fit_check(cluster, placement_request(model, variant, settings, 1, 1))
    except ValueError as error:
        return Choice(Decimal(1), f"1: no smaller size was tried ({error}).")
    suggested = result.suggested_accelerators_per_copy
    if suggested is None:
        return Choice(Decimal(1), f"1: no size holds a copy on {cluster.name}.")
    size = smallest_usual_size(Decimal(str(suggested)), cluster, model, variant, settings)
    return Choice(
        size,
        f"{size}: the smallest usual size that holds one copy with its context on {cluster.name}.",
    )


def smallest_usual_size(
    suggested: Decimal, cluster: Cluster, model: Model, variant: Variant, settings: dict[str, Any]
) -> Decimal:
    """The first usual size from placement's suggestion up; placement suggests from its own
    ladder of shares, so a usual size between the rung that failed and the suggestion (0.333
    between 0.3 and 0.4) is tried too."""
    usual = [Decimal(size) for size, _ in SIZE_CHOICES]
    above = [size for size in usual if size >= suggested]
    first = above[0] if above else suggested
    failed = max((Decimal(str(r)) for r in FRACTION_LADDER if r < suggested), default=Decimal(0))
    for size in (size for size in usual if failed < size < first):
        request = placement_request(model, variant, settings, size, 1)
        if fit_check(cluster, request).fit_empty:
            return Decimal(size_text(size))
    return Decimal(size_text(first))


def fits_now(cluster: Cluster, model: Model, variant: Variant, asked: dict[str, Any]) -> str:
    """Why one copy does not fit the cluster now (of the size asked, or the one size_for
    chooses there); "" when it does."""
    settings = asked.get("settings") or {}
    size = asked.get("size")
    if size is None:
        size = size_for(cluster, model, variant, settings).value
    try:
        result = fit_check(cluster, placement_request(model, variant, settings, size, 1))
    except ValueError as error:
        return str(error)
    if result.fit_now:
        return ""
    return first_reason(result, "No copy fits now.")


def cluster_for(model: Model, variant_name: str | None, asked: dict[str, Any]) -> Choice:
    """The first cluster, by name, where a copy fits now (with the variant asked for, or the one
    novice mode would pick there); None, with each cluster's reason, when none has room."""
    reasons = []
    for cluster in Cluster.objects.order_by("name"):
        variant = variant_named(model, variant_name) or variant_for(model, cluster).value
        if variant is None:
            reasons.append(f"{cluster.name}: no variant of {model.repo_id} runs there")
            continue
        cannot_run = why_it_cannot_run(variant, cluster)
        if cannot_run:
            reasons.append(cannot_run)
            continue
        why_not = fits_now(cluster, model, variant, asked)
        if not why_not:
            return Choice(
                cluster, f"{cluster.name}: the first cluster, by name, with room for a copy now."
            )
        reasons.append(f"{cluster.name}: {why_not}")
    return Choice(None, "; ".join(reasons) or "there are no clusters yet")


def variant_named(model: Model, name: str | None) -> Variant | None:
    return model.variants.filter(name=name).first() if name else None


def name_for(model: Model | None) -> Choice:
    """A deployment name from the model's: lowercase, digits and dashes, unique here."""
    repo_id = model.repo_id if model else ""
    base = re.sub(r"[^a-z0-9]+", "-", repo_id.split("/")[-1].lower()).strip("-")[:50]
    base = base or "model"
    name, counter = base, 2
    while Deployment.objects.filter(name=name).exists():
        name, counter = f"{base}-{counter}", counter + 1
    why = f"{name}: from the repository id" + ("" if name == base else f" ({base} is taken)")
    return Choice(name, why + ".")

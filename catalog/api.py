"""The catalog API: the models this server knows, their variants, and which are here."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema

from catalog.forms import MarketplaceFilter
from catalog.models import Model, ServerModelState, Variant
from console.api_schema import ERRORS
from placement.words import in_gib

router = Router(tags=["catalog"])


class VariantOut(Schema):
    name: str
    precision: str
    format: str
    size_gb: float
    size_estimated: bool
    engine: str
    min_compute_capability: str | None
    on_this_server: bool = Field(description="its files are downloaded and ready here")


class ModelOut(Schema):
    repo_id: str
    name: str
    family: str
    tasks: list[str]
    max_context: int
    license: str
    gated: bool
    variants: list[VariantOut]


def variant_out(variant: Variant, ready: set[int]) -> dict[str, Any]:
    return {
        "name": variant.name,
        "precision": variant.precision,
        "format": variant.format,
        "size_gb": in_gib(variant.size_bytes),
        "size_estimated": variant.size_estimated,
        "engine": variant.engine,
        "min_compute_capability": variant.min_compute_capability or None,
        "on_this_server": variant.pk in ready,
    }


def model_out(model: Model, ready: set[int]) -> dict[str, Any]:
    return {
        "repo_id": model.repo_id,
        "name": model.name,
        "family": model.family,
        "tasks": model.tasks,
        "max_context": model.max_context,
        "license": model.license,
        "gated": model.gated,
        "variants": [variant_out(variant, ready) for variant in model.variants.all()],
    }


class ModelsOut(Schema):
    items: list[ModelOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


@router.get("/models", response={200: ModelsOut, **ERRORS})
def list_models(request: HttpRequest) -> dict[str, Any]:
    """The models this server knows, with their variants and whether their files are here,
    filtered as the marketplace is: ?q=, ?family=, ?size= (small, medium, large), ?task=,
    ?format= (safetensors, gguf), ?license=, ?gated= (yes, no); ?sort= (name, size, family;
    "-" first reverses), ?limit= (1 to 200, 50) and ?cursor=."""
    ready = set(
        Variant.objects.filter(server_copies__state=ServerModelState.READY).values_list(
            "pk", flat=True
        )
    )
    filters = MarketplaceFilter(request.GET)
    page = filters.page(filters.strictly(Model.objects.prefetch_related("variants")))
    return {"items": [model_out(m, ready) for m in page.rows], "next_cursor": page.next_cursor}

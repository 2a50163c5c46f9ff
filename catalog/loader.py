"""Loads the curated catalog (catalog/data/models.json) into Model and Variant rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.db import transaction

from catalog.models import Engine, Model, Variant

CATALOG_FILE = Path(__file__).resolve().parent / "data" / "models.json"

MODEL_FIELDS = [
    "name",
    "family",
    "architecture",
    "description",
    "tasks",
    "license",
    "gated",
    "layers",
    "attention_heads",
    "kv_heads",
    "head_dim",
    "hidden_size",
    "vocab_size",
    "max_context",
    "params_total",
    "params_active",
    "native_dtype",
    "sliding_window",
    "global_layers",
    "mla",
    "encoder_only",
    "source",
]
COUNT_FIELDS = [
    "layers",
    "attention_heads",
    "kv_heads",
    "head_dim",
    "hidden_size",
    "vocab_size",
    "max_context",
    "params_total",
    "params_active",
]


class CatalogError(ValueError):
    """The catalog file has a missing or malformed entry; the message names it."""


def require_count(entry: dict[str, Any], field: str, where: str) -> None:
    value = entry.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CatalogError(f"{where}: {field} must be a positive whole number, got {value!r}")


def model_defaults(entry: dict[str, Any]) -> dict[str, Any]:
    where = entry.get("repo_id", "a model without repo_id")
    missing = [field for field in ["repo_id", *MODEL_FIELDS] if field not in entry]
    if missing:
        raise CatalogError(f"{where}: missing {', '.join(missing)}")
    for field in COUNT_FIELDS:
        require_count(entry, field, where)
    defaults = {field: entry[field] for field in MODEL_FIELDS}
    defaults["license"] = defaults["license"] or ""
    return defaults


def variant_defaults(entry: dict[str, Any], where: str) -> dict[str, Any]:
    require_count(entry, "bytes", f"{where} variant {entry.get('name')}")
    if entry.get("engine") not in Engine.values:
        raise CatalogError(
            f"{where} variant {entry.get('name')}: engine must be one of {Engine.values}"
        )
    return {
        "precision": entry["precision"],
        "format": entry["format"],
        "repo_id": entry["repo_id"],
        "gguf_file": entry.get("gguf_file") or "",
        "size_bytes": entry["bytes"],
        "size_estimated": bool(entry.get("bytes_estimated", True)),
        "engine": entry["engine"],
        "min_compute_capability": entry.get("min_compute_capability") or "",
    }


def load_entry(entry: dict[str, Any]) -> Model:
    model, _ = Model.objects.update_or_create(
        repo_id=entry.get("repo_id"), defaults=model_defaults(entry)
    )
    variants = entry.get("variants") or []
    if not variants:
        raise CatalogError(f"{model.repo_id}: has no variants")
    for variant in variants:
        Variant.objects.update_or_create(
            model=model, name=variant["name"], defaults=variant_defaults(variant, model.repo_id)
        )
    return model


def load_catalog(path: Path = CATALOG_FILE) -> list[Model]:
    """Create or update every model of the file, all or nothing."""
    try:
        entries = json.loads(path.read_text())["models"]
    except (OSError, ValueError, KeyError) as error:
        raise CatalogError(f"{path}: cannot read the catalog ({error})") from None
    with transaction.atomic():
        return [load_entry(entry) for entry in entries]

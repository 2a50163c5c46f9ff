"""`manage.py make_tiny_model`: Berth's tiny random-weight Llama, written and catalogued.

The files come from catalog/tiny_model.py (byte for byte the same on every run); the rows are
made the way "add a model from a path on this server" makes them (catalog/adding.py), except
that a second run updates them instead of refusing: the command is safe to run again, e.g. by
`make run` or a test's setup, and brings back files that went missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from catalog import downloads
from catalog.adding import model_fields, read_local_config, tasks_from
from catalog.config_facts import read_facts
from catalog.models import Model, ServerModel, ServerModelState, Variant
from catalog.tiny_model import REPO_ID, TinyModel, write_tiny_model
from catalog.variants import GGUF, SAFETENSORS, RepoFile, VariantSpec, derive_variants, select_files

# Plain names, so that tests and the README can say "the gguf variant of berth/tiny-llama".
VARIANT_NAMES = {SAFETENSORS: "safetensors", GGUF: "gguf"}


def tiny_folder() -> Path:
    return Path(settings.MODELS_DIR) / REPO_ID


def repo_files(tiny: TinyModel) -> list[RepoFile]:
    return [RepoFile(name, size) for name, size in tiny.files]


def save_model(tiny: TinyModel, config: dict[str, Any]) -> Model:
    facts = read_facts(config)
    fields = model_fields(facts, config, tiny.params_total)
    fields.update(
        name=REPO_ID.split("/", 1)[1],
        tasks=tasks_from(facts, ""),
        license="",
        gated=False,
        description="Berth's tiny random-weight Llama, for tests and demos: it answers "
        "nonsense, quickly, on a CPU.",
        source=f"{tiny.folder} on this server, written by manage.py make_tiny_model.",
    )
    return Model.objects.update_or_create(repo_id=REPO_ID, defaults=fields)[0]


def variant_fields(spec: VariantSpec) -> dict[str, Any]:
    return {
        "precision": spec.precision,
        "format": spec.format,
        "repo_id": spec.repo_id,
        "gguf_file": spec.gguf_file,
        "size_bytes": spec.size_bytes,
        "size_estimated": False,  # measured on the files just written
        "engine": spec.engine,
        "min_compute_capability": spec.min_compute_capability,
    }


def save_variants(model: Model, tiny: TinyModel, config: dict[str, Any]) -> list[Variant]:
    """One variant per format the folder holds: safetensors for vLLM, the GGUF for llama.cpp."""
    specs = derive_variants(REPO_ID, repo_files(tiny), config, model.native_dtype)
    return [
        Variant.objects.update_or_create(
            model=model, name=VARIANT_NAMES[spec.format], defaults=variant_fields(spec)
        )[0]
        for spec in specs
    ]


def keep_files(variant: Variant, tiny: TinyModel) -> ServerModel:
    """The variant's files are in the folder already: its server copy is ready."""
    chosen = select_files(variant.format, variant.gguf_file, repo_files(tiny))
    size = sum(f.size for f in chosen)
    fields = {
        "revision": "local",
        "path": str(tiny.folder),
        "size_bytes": size,
        "progress_bytes": size,
        "files": [[f.path, f.size] for f in chosen],
        "state": ServerModelState.READY,
        "error": "",
        "finished_at": timezone.now(),
    }
    return ServerModel.objects.update_or_create(
        variant=variant, requested_revision="", defaults=fields
    )[0]


def was_ready(variant: Variant) -> bool:
    return ServerModel.objects.filter(
        variant=variant, requested_revision="", state=ServerModelState.READY
    ).exists()


def register(tiny: TinyModel) -> Model:
    """The model, its two variants and their ready files on this server, created or updated."""
    config = read_local_config(tiny.folder)
    with transaction.atomic():
        model = save_model(tiny, config)
        for variant in save_variants(model, tiny, config):
            ready_before = was_ready(variant)
            row = keep_files(variant, tiny)
            if not ready_before:
                # As a finished download does: deployments that waited for the files go on.
                downloads.files_changed(row.pk)
    return model


class Command(BaseCommand):
    help = (
        "Write Berth's tiny random-weight Llama (safetensors for vLLM, GGUF for llama.cpp) "
        "under the models folder and add it to the catalog, ready on this server."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        tiny = write_tiny_model(tiny_folder().resolve())
        model = register(tiny)
        names = ", ".join(sorted(model.variants.values_list("name", flat=True)))
        self.stdout.write(
            f"Tiny model written to {tiny.folder}: {model.repo_id} is in the catalog with "
            f"variants {names}, both ready on this server."
        )

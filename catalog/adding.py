"""Adding a model to the catalog: from a Hugging Face repository, or from a path on this server.

Both read config.json for the architecture facts (catalog/config_facts.py) and the file list
for the variants (catalog/variants.py), then store the model and its variants in one
transaction. Problems come back as AddRefused / HubProblem with words that say what to do.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from catalog import hub
from catalog.config_facts import ConfigError, ConfigFacts, read_facts
from catalog.hub import Access, HubProblem, Listing
from catalog.models import Model, ServerModel, ServerModelState, Task, Variant
from catalog.variants import RepoFile, VariantSpec, derive_variants, select_files
from console import audit

log = logging.getLogger(__name__)

FAMILY_BY_TYPE = {
    "llama": "Llama",
    "qwen2": "Qwen2.5",
    "qwen3": "Qwen3",
    "qwen3_moe": "Qwen3",
    "mistral": "Mistral",
    "gemma3": "Gemma 3",
    "gemma3_text": "Gemma 3",
    "gpt_oss": "gpt-oss",
    "phi3": "Phi",
    "deepseek_v3": "DeepSeek V3",
    "xlm-roberta": "BGE",
}
SUPPORTED = "safetensors (served by vLLM) or GGUF (served by llama.cpp)"


class AddRefused(ValueError):
    """The model cannot be added; the message says why and what to do."""


# --- facts -----------------------------------------------------------------------------------


def facts_from(config: dict[str, Any], where: str) -> ConfigFacts:
    try:
        return read_facts(config)
    except ConfigError as error:
        raise HubProblem(
            HubProblem.BAD_CONFIG,
            f"The config.json of {where} cannot be read: {error}. Berth needs the layer, head, "
            "hidden-size and vocabulary counts of the language model to size its memory; "
            "pick a repository with a transformers-style config.json.",
        ) from None


def tasks_from(facts: ConfigFacts, chat_template: str) -> list[str]:
    """What the model does: embeddings for encoders; chat, plus what its template shows."""
    if facts.encoder_only:
        return [Task.EMBEDDINGS]
    tasks = [Task.CHAT]
    if "<think>" in chat_template or "enable_thinking" in chat_template:
        tasks.append(Task.REASONING)
    if "tools" in chat_template:
        tasks.append(Task.TOOL_CALLING)
    return tasks


def family_of(config: dict[str, Any]) -> str:
    kind = str(config.get("model_type", ""))
    return FAMILY_BY_TYPE.get(kind, kind)[:60]


def model_fields(facts: ConfigFacts, config: dict[str, Any], params_total: int) -> dict[str, Any]:
    """The Model row's fields; the hub's parameter count wins over ours from the shapes."""
    fields = facts.as_fields()
    share = facts.params_active / facts.params_total if facts.params_total else 1.0
    fields["params_total"] = params_total
    fields["params_active"] = max(1, min(params_total, round(params_total * share)))
    fields["family"] = family_of(config)
    return fields


def store(repo_id: str, fields: dict[str, Any], specs: list[VariantSpec], actor: Any) -> Model:
    if Model.objects.filter(repo_id__iexact=repo_id).exists():
        raise AddRefused(f"{repo_id} is already in the catalog.")
    model = Model.objects.create(repo_id=repo_id, added_by=actor, **fields)
    for spec in specs:
        Variant.objects.create(
            model=model,
            name=spec.name,
            precision=spec.precision,
            format=spec.format,
            repo_id=spec.repo_id,
            gguf_file=spec.gguf_file,
            size_bytes=spec.size_bytes,
            size_estimated=False,  # read from the files themselves
            engine=spec.engine,
            min_compute_capability=spec.min_compute_capability,
        )
    return model


# --- from the hub ----------------------------------------------------------------------------


def read_config(listing: Listing, access: Access) -> tuple[dict[str, Any], str]:
    """config.json of the repository, or of its base model (GGUF repositories often have
    none); returns it with the repository it came from."""
    names = {f.path for f in listing.files}
    if "config.json" in names:
        return hub.read_json(listing.repo_id, listing.sha, "config.json", access), listing.repo_id
    base = listing.base_model
    if base and hub.valid_repo_id(base):
        base_listing = hub.read_listing(base, "", access)
        if "config.json" in {f.path for f in base_listing.files}:
            config = hub.read_json(base, base_listing.sha, "config.json", access)
            return config, base
    raise HubProblem(
        HubProblem.BAD_CONFIG,
        f"{listing.repo_id} has no config.json (nor a base model that has one), so Berth "
        "cannot read the model's architecture. Add the repository it was made from instead.",
    )


def chat_template(listing: Listing, access: Access) -> str:
    """The chat template, to tell tool calling and reasoning; its absence is no error."""
    if "tokenizer_config.json" not in {f.path for f in listing.files}:
        return ""
    try:
        tokenizer = hub.read_json(listing.repo_id, listing.sha, "tokenizer_config.json", access)
    except HubProblem:
        return ""
    template = tokenizer.get("chat_template", "")
    return json.dumps(template) if not isinstance(template, str) else template


def no_weights(listing: Listing) -> HubProblem:
    found = ", ".join(sorted(f.path for f in listing.files)[:6]) or "no files"
    return HubProblem(
        HubProblem.NO_WEIGHTS,
        f"{listing.repo_id} has no weights Berth can serve (found: {found}). Berth hosts "
        f"{SUPPORTED}: pick a repository that publishes one of those.",
    )


def weights_first(listing: Listing) -> None:
    """Refuse a repository without servable weights before reading anything else."""
    if not derive_variants(listing.repo_id, list(listing.files), {}, "bfloat16"):
        raise no_weights(listing)


def add_from_hub(repo_id: str, revision: str, access: Access, actor: Any) -> Model:
    """Read the repository's config.json and file list; store the model and its variants."""
    if Model.objects.filter(repo_id__iexact=repo_id).exists():
        raise AddRefused(f"{repo_id} is already in the catalog.")
    listing = hub.read_listing(repo_id, revision, access)
    weights_first(listing)
    config, config_repo = read_config(listing, access)
    facts = facts_from(config, config_repo)
    specs = derive_variants(listing.repo_id, list(listing.files), config, facts.native_dtype)
    total = listing.safetensors_total or facts.params_total
    fields = model_fields(facts, config, total)
    fields.update(
        name=listing.repo_id.split("/", 1)[1][:120],
        tasks=tasks_from(facts, chat_template(listing, access)),
        license=listing.license,
        gated=listing.gated,
        description=f"Added from Hugging Face ({listing.pipeline_tag or 'model'}).",
        source=f"{hub.endpoint()}/{listing.repo_id} at commit {listing.sha}: config.json"
        + (f" of {config_repo}" if config_repo != listing.repo_id else "")
        + " and the file list.",
    )
    with transaction.atomic():
        model = store(listing.repo_id, fields, specs, actor)
    log.info("%s added %s from the hub (%d variants)", actor, model.repo_id, len(specs))
    audit.record(actor, audit.MODEL_ADDED, model.repo_id, f"From the hub, {len(specs)} variants.")
    return model


# --- from a path on this server --------------------------------------------------------------


def local_files(root: Path) -> list[RepoFile]:
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            full = Path(folder) / name
            if full.is_file():
                found.append(RepoFile(str(full.relative_to(root)), full.stat().st_size))
    return found


def check_directory(path: str) -> Path:
    if not path or not os.path.isabs(path):
        raise AddRefused("Give an absolute path, e.g. /srv/models/Qwen3-8B.")
    root = Path(path).resolve()
    if not root.is_dir():
        raise AddRefused(f"{root} is not a directory on this server.")
    if not (root / "config.json").is_file():
        raise AddRefused(f"{root} has no config.json: Berth reads the model's shape from it.")
    return root


def read_local_config(root: Path) -> dict[str, Any]:
    try:
        loaded = json.loads((root / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise AddRefused(f"{root}/config.json cannot be read: {error}.") from None
    if not isinstance(loaded, dict):
        raise AddRefused(f"{root}/config.json is not a JSON object.")
    return loaded


def keep_files(model: Model, root: Path, files: list[RepoFile], actor: Any) -> None:
    """The files are here already: each variant is on this server, ready."""
    for variant in model.variants.all():
        chosen = select_files(variant.format, variant.gguf_file, files)
        ServerModel.objects.create(
            variant=variant,
            revision="local",
            path=str(root),
            size_bytes=sum(f.size for f in chosen),
            progress_bytes=sum(f.size for f in chosen),
            files=[[f.path, f.size] for f in chosen],
            state=ServerModelState.READY,
            requested_by=actor,
            finished_at=timezone.now(),
        )


def add_from_path(path: str, repo_id: str, actor: Any) -> Model:
    """An admin's model files already on this server: catalogued and kept where they are."""
    root = check_directory(path)
    repo_id = repo_id or f"local/{root.name}"
    config = read_local_config(root)
    try:
        facts = read_facts(config)
    except ConfigError as error:
        raise AddRefused(f"{root}/config.json cannot be read: {error}.") from None
    files = local_files(root)
    specs = derive_variants(repo_id, files, config, facts.native_dtype)
    if not specs:
        raise AddRefused(f"{root} holds no weights Berth can serve: it hosts {SUPPORTED}.")
    fields = model_fields(facts, config, facts.params_total)
    fields.update(
        name=root.name[:120],
        tasks=tasks_from(facts, ""),
        description="Added from a path on this server.",
        source=f"{root} on this server: config.json and the files there.",
    )
    with transaction.atomic():
        model = store(repo_id, fields, specs, actor)
        keep_files(model, root, files, actor)
    log.info("%s added %s from %s", actor, model.repo_id, root)
    audit.record(actor, audit.MODEL_ADDED, model.repo_id, f"From {root} on this server.")
    return model

"""The catalog API: the models this server knows, their variants and which are here; adding a
model from the Hugging Face hub, downloading a variant's files and trying a failed download again.

The changes are the console's (catalog/adding.py, catalog/downloads.py), with its roles:
operators of any team add and download, every user reads. Their refusals come back as 400
naming the field to change; an unknown model or variant is a 404.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from django.http import Http404, HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import AfterValidator

from catalog import adding, downloads, hub
from catalog.forms import ModelListFilter
from catalog.hub import Access, HubProblem
from catalog.models import (
    SERVER_MODEL_RETRYABLE,
    Model,
    ServerModel,
    ServerModelState,
    Variant,
)
from console.access import operated_teams, require_operator_somewhere, require_platform_admin
from console.api_schema import ERRORS, StrictSchema
from console.models import Team
from deployments.actions import ActionRefused, delete_server_files
from placement.words import in_gib

router = Router(tags=["catalog"])

# --- input types ---------------------------------------------------------------------------

REPO_ID = hub.REPO_ID_PATTERN
REVISION = hub.REVISION_PATTERN


def matching(pattern: str, words: str) -> AfterValidator:
    """Checks `pattern` as JSON Schema reads it (`$` ends the text, a newline included) and
    answers `words` when it does not match, rather than the pattern."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if compiled.fullmatch(value) is None:
            raise ValueError(words)
        return value

    return AfterValidator(check)


RepoId = Annotated[
    str,
    Field(min_length=3, max_length=200, json_schema_extra={"pattern": REPO_ID}),
    matching(REPO_ID, "give the repository as owner/name, e.g. Qwen/Qwen3-8B"),
]
Revision = Annotated[
    str,
    Field(max_length=100, json_schema_extra={"pattern": REVISION}),
    matching(REVISION, "a revision is a branch, tag or commit: letters, digits, . _ - and /"),
]
# Any text of these lengths: a name no variant or team has is refused as unknown (compared in
# Python, so that not even a NUL character reaches PostgreSQL).
VariantName = Annotated[str, Field(min_length=1, max_length=40)]
TeamName = Annotated[str, Field(min_length=1, max_length=63)]
TEAM_HELP = (
    "the team whose Hugging Face token reads gated repositories, one you operate; "
    "left out: no token (public repositories only)"
)


class AddModelIn(StrictSchema):
    repo_id: RepoId = Field(description="the Hugging Face repository, owner/name")
    revision: Revision = Field("", description="a branch, tag or commit; empty: main")
    team: TeamName | None = Field(None, description=TEAM_HELP)


class DownloadIn(StrictSchema):
    variant: VariantName = Field(description="the variant's name, e.g. bf16")
    revision: Revision = Field("", description="a branch, tag or commit; empty: main")
    team: TeamName | None = Field(None, description=TEAM_HELP)


class DeleteFilesIn(StrictSchema):
    variant: VariantName = Field(description="the variant whose files to delete from this server")


class RetryIn(StrictSchema):
    variant: VariantName = Field(description="the variant whose failed download to try again")


# --- output types --------------------------------------------------------------------------


class DownloadOut(Schema):
    state: str = Field(description="queued, downloading, ready, failed or must_redownload")
    revision: str = Field(description="the branch, tag or commit asked for; empty: main")
    progress_gb: float
    size_gb: float = Field(description="0 until the download has listed the files")
    error: str = Field(description="why it failed and what to do; empty unless it failed")


class VariantOut(Schema):
    name: str
    precision: str
    format: str
    size_gb: float
    size_estimated: bool
    engine: str
    min_compute_capability: str | None
    on_this_server: bool = Field(description="its files are downloaded and ready here")
    download: DownloadOut | None = Field(
        description="its latest download to this server; null: never asked for"
    )


class ModelOut(Schema):
    id: int
    repo_id: str
    name: str
    family: str
    tasks: list[str]
    max_context: int
    license: str
    gated: bool
    variants: list[VariantOut]


class ModelsOut(Schema):
    items: list[ModelOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


# --- what a model looks like ---------------------------------------------------------------


@dataclass(frozen=True)
class OnThisServer:
    """What this server holds of some models' variants (one query): which are ready, and
    each one's latest download, by variant id."""

    ready: set[int]
    latest: dict[int, ServerModel]

    @classmethod
    def of(cls, models: list[Model]) -> OnThisServer:
        rows = list(ServerModel.objects.filter(variant__model__in=models).order_by("pk"))
        ready = {row.variant_id for row in rows if row.state == ServerModelState.READY}
        return cls(ready, {row.variant_id: row for row in rows})


def download_out(row: ServerModel | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "state": row.state,
        "revision": row.requested_revision,
        "progress_gb": in_gib(row.progress_bytes),
        "size_gb": in_gib(row.size_bytes),
        "error": row.error,
    }


def variant_out(variant: Variant, here: OnThisServer) -> dict[str, Any]:
    return {
        "name": variant.name,
        "precision": variant.precision,
        "format": variant.format,
        "size_gb": in_gib(variant.size_bytes),
        "size_estimated": variant.size_estimated,
        "engine": variant.engine,
        "min_compute_capability": variant.min_compute_capability or None,
        "on_this_server": variant.pk in here.ready,
        "download": download_out(here.latest.get(variant.pk)),
    }


def model_out(model: Model, here: OnThisServer) -> dict[str, Any]:
    return {
        "id": model.pk,
        "repo_id": model.repo_id,
        "name": model.name,
        "family": model.family,
        "tasks": model.tasks,
        "max_context": model.max_context,
        "license": model.license,
        "gated": model.gated,
        "variants": [variant_out(variant, here) for variant in model.variants.all()],
    }


def models_out(models: list[Model]) -> list[dict[str, Any]]:
    here = OnThisServer.of(models)
    return [model_out(model, here) for model in models]


def catalog_model(pk: int) -> Model:
    model = Model.objects.prefetch_related("variants").filter(pk=pk).first()
    if model is None:
        raise Http404(f"No model {pk} in the catalog; GET /api/v1/models lists them.")
    return model


def shown(pk: int) -> dict[str, Any]:
    return models_out([catalog_model(pk)])[0]


# --- finding what a request names ----------------------------------------------------------


def variant_named(model: Model, name: str) -> Variant | None:
    return next((variant for variant in model.variants.all() if variant.name == name), None)


def no_such_variant(model: Model, name: str) -> Status[dict[str, Any]]:
    names = ", ".join(variant.name for variant in model.variants.all()) or "none"
    words = f"{model.repo_id} has no variant {name}; its variants: {names}"
    return Status(404, {"detail": f"variant: {words}", "field": "variant"})


def token_team(user: Any, name: str | None) -> Team | None:
    """The team whose Hugging Face token is used, as the pages' team choice: one the user
    operates; None (no token, public repositories only) when the request names none."""
    if name is None:
        return None
    teams = list(operated_teams(user))
    team = next((team for team in teams if team.name == name), None)
    if team is None:
        yours = ", ".join(other.name for other in teams) or "none"
        raise ActionRefused(f"{name} is not a team you operate; you operate {yours}", "team")
    return team


def failed_download(variant: Variant) -> ServerModel:
    """The variant's latest download that failed or whose files went missing."""
    rows = variant.server_copies.filter(state__in=SERVER_MODEL_RETRYABLE)
    row = rows.order_by("-pk").first()
    if row is None:
        raise downloads.DownloadRefused(
            f"{variant} has nothing to try again: only a failed download or missing files "
            "can be tried again."
        )
    return row


# What to change when the hub refuses: the repository, unless the problem says otherwise.
HUB_FIELDS = {
    HubProblem.REVISION: "revision",
    HubProblem.GATED: "team",
    HubProblem.TOKEN_REFUSED: "team",
    HubProblem.UNREACHABLE: "",
    HubProblem.HUB_ERROR: "",
}


@contextmanager
def refusals(field: str) -> Iterator[None]:
    """The catalog's refusals as the API's 400, naming the field to change."""
    try:
        yield
    except (adding.AddRefused, downloads.DownloadRefused) as refused:
        raise ActionRefused(str(refused), field) from None
    except HubProblem as problem:
        raise ActionRefused(problem.message, HUB_FIELDS.get(problem.kind, field)) from None


# --- the endpoints -------------------------------------------------------------------------


@router.get("/models", response={200: ModelsOut, **ERRORS})
def list_models(request: HttpRequest) -> dict[str, Any]:
    """The models this server knows, with their variants and whether their files are here,
    filtered as the marketplace is: ?q=, ?family=, ?size= (small, medium, large), ?task=,
    ?format= (safetensors, gguf), ?license=, ?gated= (yes, no), and ?repo_id= (exactly; one
    nobody has lists nothing); ?sort= (name, size, family; "-" first reverses), ?limit= (1 to
    200, 50) and ?cursor=."""
    filters = ModelListFilter(request.GET)
    page = filters.page(filters.strictly(Model.objects.prefetch_related("variants")))
    return {"items": models_out(page.rows), "next_cursor": page.next_cursor}


@router.get("/models/{int:id}", response={200: ModelOut, **ERRORS})
def show_model(request: HttpRequest, id: int) -> dict[str, Any]:
    return shown(id)


@router.post("/models", response={201: ModelOut, **ERRORS})
def add_model(request: HttpRequest, payload: AddModelIn) -> Status[dict[str, Any]]:
    """Add a model from a Hugging Face repository (operators of any team), as the Add model
    page does: its config.json and file list are read now, its variants follow from them."""
    require_operator_somewhere(request.user)
    access = Access.of_team(token_team(request.user, payload.team))
    with refusals("repo_id"):
        model = adding.add_from_hub(payload.repo_id, payload.revision, access, request.user)
    return Status(201, shown(model.pk))


@router.post("/models/{int:id}/download", response={202: ModelOut, **ERRORS})
def download(request: HttpRequest, id: int, payload: DownloadIn) -> Status[dict[str, Any]]:
    """Download a variant's files to this server (operators of any team); it goes on in the
    background. A variant already here or on its way comes back as it is; a failed one is
    queued again."""
    require_operator_somewhere(request.user)
    model = catalog_model(id)
    variant = variant_named(model, payload.variant)
    if variant is None:
        return no_such_variant(model, payload.variant)
    team = token_team(request.user, payload.team)
    with refusals("revision"):
        downloads.request_download(variant, payload.revision, team, request.user)
    return Status(202, shown(id))


@router.post("/models/{int:id}/delete-files", response={200: ModelOut, **ERRORS})
def delete_files(request: HttpRequest, id: int, payload: DeleteFilesIn) -> Status[dict[str, Any]]:
    """Delete the variant's files from this server (platform admins, as On this server's
    Delete), never while a deployment uses them or their download runs."""
    require_platform_admin(request.user)
    model = catalog_model(id)
    variant = variant_named(model, payload.variant)
    if variant is None:
        return no_such_variant(model, payload.variant)
    with refusals("variant"):
        delete_server_files(request.user, downloaded(variant))
    return Status(200, shown(id))


def downloaded(variant: Variant) -> ServerModel:
    """The variant's latest files on this server, whatever their state."""
    row = variant.server_copies.order_by("-pk").first()
    if row is None:
        raise downloads.DownloadRefused(f"{variant} has no files on this server to delete.")
    return row


@router.post("/models/{int:id}/retry", response={202: ModelOut, **ERRORS})
def retry(request: HttpRequest, id: int, payload: RetryIn) -> Status[dict[str, Any]]:
    """Try the variant's failed download (or files gone missing) again (operators of any
    team), as On this server's Try again does; the partial files are kept."""
    require_operator_somewhere(request.user)
    model = catalog_model(id)
    variant = variant_named(model, payload.variant)
    if variant is None:
        return no_such_variant(model, payload.variant)
    with refusals("variant"):
        downloads.try_again(failed_download(variant), request.user)
    return Status(202, shown(id))

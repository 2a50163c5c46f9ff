"""The deployments API: host, read, scale, stop, start, check, retry, delete and change
deployments, and check the fit or estimate the memory of a model before hosting it.

What it reads, each field with its rules, is deployments/api_input.py; the API's shared
vocabulary (the error body, strict input schemas) is console/api_schema.py (GiB, like every
unit, comes from placement.words); console/api_v1.py assembles the routers.
Changes go through deployments.actions only; access through deployments.access.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import HttpRequest
from ninja import Field, Router, Schema, Status

import placement
from catalog.models import Model, Variant
from clusters.models import Accelerator, Cluster
from console.access import NEEDS_OPERATE, operated_teams, team_roles
from console.api_schema import ERRORS, InvalidForModel
from console.models import Team
from deployments import actions, choosing, machine_files, repacking
from deployments.access import get_deployment, visible_deployments
from deployments.actions import ActionRefused, HostRequest
from deployments.api_input import (
    AutoscalingIn,
    AutoscalingSetIn,
    ChatNameIn,
    EngineSettingsIn,
    EstimateIn,
    FitCheckIn,
    HostIn,
    QueueIn,
    ReplyWaitIn,
    RoutingIn,
    ScaleIn,
)
from deployments.choices import CopyState
from deployments.engine.settings import CATALOG as ENGINE_SETTINGS
from deployments.forms import DeploymentFilter, LogFilter
from deployments.models import Copy, Deployment, LogLine, Reservation
from deployments.placing import estimate, fit_check, fit_check_with_moves, placement_request
from gateway import cost
from placement.repack import Move
from placement.words import in_gib

# --- output types --------------------------------------------------------------------------


class ChoiceOut(Schema):
    value: str = Field(description="what Berth chose for a field the request left out")
    why: str


class AcceptedOut(Schema):
    id: int
    state: str | None = Field(description="the state now; null once the deployment is removed")


class HostedOut(AcceptedOut):
    chosen: dict[str, ChoiceOut] = Field(
        default_factory=dict, description="variant, cluster and name Berth chose, and why"
    )


class CopyOut(Schema):
    ordinal: int
    state: str
    topology: str = Field(description="managed_cluster or standalone_cluster")
    node_name: str | None = Field(description="the machine the copy is placed on")
    gpu_indexes: list[int] = Field(description="GPU indexes on the machine (a slice's parent)")
    mig_profile: str | None
    gpu_vendor: str | None
    hardware_class: str | None
    sharing_class: str | None
    allocated_capacity_gb: float = Field(description="GiB (2^30 bytes) reserved per GPU")
    gpu_memory_utilization: float | None
    attempts: int
    pending_reason: str
    last_error_code: str | None
    last_error_message: str
    last_error_at: datetime | None


class AutoscalingOut(Schema):
    min_copies: int
    max_copies: int
    target_in_flight: float
    target_ttft_ms: float | None
    up_window_s: int | None = Field(description="null: BERTH_AUTOSCALE_UP_WINDOW_S")
    down_window_s: int | None = Field(description="null: BERTH_AUTOSCALE_DOWN_WINDOW_S")
    idle_minutes: int | None


class DeploymentCostOut(Schema):
    currency: str
    today: float = Field(description="the cost of the room its copies held today (UTC)")
    total: float = Field(description="since its first copy was placed")
    tokens: int = Field(description="prompt and completion tokens it served")
    per_million_tokens: float | None = Field(description="total ÷ tokens × 1e6; null: no tokens")
    unpriced: list[str] = Field(description="what it held that has no price yet (counted as 0)")


class DeploymentOut(Schema):
    id: int
    name: str
    team: str
    model: str
    variant: str
    cluster: str
    engine: str
    revision: str
    accelerators_per_copy: float
    copies_wanted: int
    copies_ready: int
    engine_settings: dict[str, Any]
    chat_name: str
    reply_wait_s: int | None
    routing: str = Field(description="least_loaded, prefix or session (POST …/routing)")
    max_waiting: int = Field(description="the queue when every copy is full (POST …/queue)")
    queue_wait_s: int | None
    state: str
    last_message: str
    last_checked_at: datetime | None
    last_error_code: str | None
    last_error_message: str
    last_error_at: datetime | None
    notices: list[str]
    created_by: str | None
    created_at: datetime
    copies: list[CopyOut]
    autoscaling: AutoscalingOut | None = Field(description="null: a fixed number of copies")
    movable: bool = Field(description="false: re-packing never moves its copies")
    make_room: bool = Field(
        description="true: copies of other deployments may be moved to make room for its own"
    )
    auto_rollback: bool = Field(
        description="true: a revision whose copies never serve is rolled back by itself"
    )
    cost: DeploymentCostOut = Field(
        description="at the admin's prices: GPUs held × hours × price per hour"
    )


class MachineFilesOut(Schema):
    machine: str
    ready: bool
    state: str | None = Field(
        description="queued, copying, present, missing or failed; null when never checked"
    )
    progress_bytes: int
    size_bytes: int
    message: str


class ModelFilesOut(Schema):
    on: int = Field(description="machines of the cluster that have the model's files")
    of: int = Field(description="machines of the cluster")
    summary: str
    message: str = Field("", description="what Sync did, when this answers a Sync")
    machines: list[MachineFilesOut]


class EstimateOut(Schema):
    weights_gb: float
    kv_cache_gb: float = Field(description="one request at max_model_len")
    activations_gb: float
    overhead_gb: float = Field(description="non-torch allocations and CUDA graphs")
    total_gb: float
    total_bytes: int = Field(description="total_gb exactly, in bytes")
    kv_cache_bytes_per_token: int
    tensor_parallel: int
    max_model_len: int


class PlacedOut(Schema):
    copy_number: int = Field(description="1-based")
    machine: str
    accelerators: list[int]
    slice: str | None = Field(description="the MIG profile, when the copy runs in a slice")
    allocated_capacity_gb: float
    gpu_memory_utilization: float
    hardware_class: str
    sharing_class: str


class NotPlacedOut(Schema):
    copy_number: int
    reason: str
    message: str


class GpusOut(Schema):
    machine: str
    accelerators: list[int]


class MoveOut(Schema):
    deployment: str | None = Field(description="null: another team's (named to staff only)")
    copy: int | None
    from_: GpusOut = Field(alias="from")
    to: GpusOut
    gb: float


class FitCheckOut(Schema):
    fit_now: int = Field(description="copies of this size the cluster has room for now")
    fit_empty: int = Field(description="... and with nothing else running")
    suggested_accelerators_per_copy: float | None
    estimate: EstimateOut
    placed: list[PlacedOut]
    not_placed: list[NotPlacedOut]
    notices: list[str]
    moves: list[MoveOut] | None = Field(
        None,
        description="with allow_moves: the moves of other copies, in order, after which it "
        "fits (each starts at its new place before the old one stops)",
    )
    moves_words: str = Field("", description="the moves, or why none was found, in words")


# --- finding what a request names ----------------------------------------------------------


def listed(names: Iterable[str]) -> str:
    return ", ".join(names) or "none"


def find_model(repo_id: str) -> Model:
    model = Model.objects.filter(repo_id=repo_id).first()
    if model is not None:
        return model
    known = list(Model.objects.values_list("repo_id", flat=True))
    close = difflib.get_close_matches(repo_id, known, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise ActionRefused(
        f"{repo_id} is not in the catalog; {hint}GET /api/v1/models lists the models", "model"
    )


def find_variant(model: Model, name: str) -> Variant:
    variants = {variant.name: variant for variant in model.variants.all()}
    if name in variants:
        return variants[name]
    raise ActionRefused(
        f"{model.repo_id} has no variant {name}; its variants: {listed(variants)}", "variant"
    )


def find_cluster(name: str) -> Cluster:
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is not None:
        return cluster
    names = Cluster.objects.values_list("name", flat=True)
    raise ActionRefused(f"no cluster named {name}; clusters: {listed(names)}", "cluster")


def hosting_team(user: Any, name: str | None) -> Team:
    """The team to host in: the one named, or the user's only team they operate."""
    teams = list(operated_teams(user))
    if not teams:
        raise PermissionDenied("Hosting needs the operator role in a team; you have it in none.")
    names = listed(team.name for team in teams)
    if not name:
        if len(teams) == 1:
            return teams[0]
        raise ActionRefused(f"name the team to host in; you can host in {names}", "team")
    chosen = next((team for team in teams if team.name == name), None)
    if chosen is not None:
        return chosen
    if Team.objects.filter(name=name, pk__in=list(team_roles(user))).exists():
        raise PermissionDenied(
            f"Your role in team {name} only lets you read; hosting needs operator."
        )
    raise ActionRefused(f"{name} is not a team you can host in; you can host in {names}", "team")


def placement_problem(error: ValueError, size_field: str) -> InvalidForModel:
    """Placement's `field: problem` message, with the field named as this API names it."""
    field, sep, problem = str(error).partition(": ")
    if not sep:
        return InvalidForModel(str(error), "")
    field = field.removeprefix("engine.")
    if field in ENGINE_SETTINGS:
        field = f"engine_settings.{field}"
    elif field == "accelerators_per_copy":
        field = size_field
    return InvalidForModel(problem, field)


# --- what a deployment looks like ----------------------------------------------------------


def gpu_index(accelerator: Accelerator) -> int:
    """A MIG slice is shown by its GPU's index: the one operators and nvidia-smi know."""
    return (accelerator.parent or accelerator).index


def copy_out(copy: Copy, topology: str) -> dict[str, Any]:
    held = [row.accelerator for row in copy.reservations.all() if row.accelerator is not None]
    slices = [gpu.mig_profile for gpu in held if gpu.parent_id]
    return {
        "ordinal": copy.ordinal,
        "state": copy.state,
        "topology": topology,
        "node_name": copy.machine.name if copy.machine else None,
        "gpu_indexes": list(dict.fromkeys(gpu_index(gpu) for gpu in held)),
        "mig_profile": slices[0] if slices else None,
        "gpu_vendor": held[0].vendor if held else None,
        "hardware_class": copy.hardware_class or None,
        "sharing_class": copy.sharing_class or None,
        "allocated_capacity_gb": in_gib(copy.allocated_bytes),
        "gpu_memory_utilization": copy.gpu_memory_utilization,
        "attempts": copy.attempts,
        "pending_reason": copy.pending_reason,
        "last_error_code": copy.last_error_code or None,
        "last_error_message": copy.last_error_message,
        "last_error_at": copy.last_error_at,
    }


def cost_out(spent: cost.DeploymentCost) -> dict[str, Any]:
    per_million = spent.per_million_tokens
    return {
        "currency": spent.currency,
        "today": round(float(spent.today), 4),
        "total": round(float(spent.total), 4),
        "tokens": spent.tokens,
        "per_million_tokens": None if per_million is None else round(float(per_million), 4),
        "unpriced": list(spent.unpriced),
    }


def deployments_out(deployments: Iterable[Deployment]) -> list[dict[str, Any]]:
    """Each deployment as the API shows it, their costs read together (gateway/cost.py)."""
    rows = list(deployments)
    costs = cost.deployment_costs([d.pk for d in rows])
    return [deployment_out(d, costs[d.pk]) for d in rows]


def deployment_out(deployment: Deployment, spent: cost.DeploymentCost) -> dict[str, Any]:
    copies = list(deployment.copies.all())
    topology = deployment.cluster.topology
    return {
        "id": deployment.pk,
        "name": deployment.name,
        "team": deployment.team.name,
        "model": deployment.model.repo_id,
        "variant": deployment.variant.name,
        "cluster": deployment.cluster.name,
        "engine": deployment.engine,
        "revision": deployment.revision,
        "accelerators_per_copy": float(deployment.accelerators_per_copy),
        "copies_wanted": deployment.copies_wanted,
        "copies_ready": sum(copy.state == CopyState.READY for copy in copies),
        "engine_settings": deployment.engine_settings,
        "chat_name": deployment.chat_name,
        "reply_wait_s": deployment.reply_wait_s,
        "routing": deployment.routing,
        "max_waiting": deployment.max_waiting,
        "queue_wait_s": deployment.queue_wait_s,
        "state": deployment.state,
        "last_message": deployment.last_message,
        "last_checked_at": deployment.last_checked_at,
        "last_error_code": deployment.last_error_code or None,
        "last_error_message": deployment.last_error_message,
        "last_error_at": deployment.last_error_at,
        "notices": deployment.notices,
        "created_by": deployment.created_by.get_username() if deployment.created_by else None,
        "created_at": deployment.created_at,
        "copies": [copy_out(copy, topology) for copy in copies],
        "autoscaling": deployment.autoscaling,
        "movable": deployment.movable,
        "make_room": deployment.make_room,
        "auto_rollback": deployment.auto_rollback,
        "cost": cost_out(spent),
    }


def with_copies(deployments: Any) -> Any:
    """One query per relation, however many deployments and copies there are."""
    held = Reservation.objects.select_related("accelerator__parent")
    copies = (
        Copy.objects.select_related("machine")
        .prefetch_related(Prefetch("reservations", queryset=held))
        .order_by("ordinal")
    )
    return deployments.select_related("created_by").prefetch_related(
        Prefetch("copies", queryset=copies)
    )


def shown(user: Any, pk: int) -> dict[str, Any]:
    return deployments_out([with_copies(visible_deployments(user)).get(pk=pk)])[0]


# --- deployments ---------------------------------------------------------------------------

router = Router(tags=["deployments"])


class DeploymentsOut(Schema):
    items: list[DeploymentOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


@router.get("/deployments", response={200: DeploymentsOut, **ERRORS})
def list_deployments(request: HttpRequest) -> dict[str, Any]:
    """The deployments of your teams (every team's, for platform admins), filtered and sorted
    as the list page is: ?state= (a state or a group: active, serving, failed, stopped),
    ?cluster= and ?model= (ids), ?q= (in the name or the chat name); ?sort= (name, created,
    state, model, cluster, team; "-" first reverses), ?limit= (1 to 200, 50) and ?cursor=."""
    filters = DeploymentFilter(request.GET)
    page = filters.page(with_copies(filters.strictly(visible_deployments(request.user))))
    return {"items": deployments_out(page.rows), "next_cursor": page.next_cursor}


class LogLineOut(Schema):
    seq: int = Field(description="the line's place in the deployment's log; ?after= it follows")
    at: datetime = Field(description="when, in UTC")
    level: str
    stream: str
    machine: str
    text: str


class LogLinesOut(Schema):
    items: list[LogLineOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


@router.get("/deployments/{int:id}/logs", response={200: LogLinesOut, **ERRORS})
def list_log_lines(request: HttpRequest, id: int) -> dict[str, Any]:
    """A deployment's log lines, oldest first (?sort=-seq: newest first), filtered as its logs
    page is: ?level= (and above), ?stream=, ?machine=, ?pattern=, ?q=; ?after= a seq (to follow
    the log: pass the last seq seen), ?limit= (1 to 200, 50) and ?cursor=."""
    deployment = get_deployment(request.user, id)
    filters = LogFilter(request.GET)
    lines = filters.strictly(LogLine.objects.filter(deployment=deployment))
    page = filters.page(lines)
    return {"items": [log_line_out(line) for line in page.rows], "next_cursor": page.next_cursor}


def log_line_out(line: LogLine) -> dict[str, Any]:
    fields = ("seq", "at", "level", "stream", "text")
    return {**{name: getattr(line, name) for name in fields}, "machine": line.machine_name}


@router.get("/deployments/{int:id}", response={200: DeploymentOut, **ERRORS})
def show_deployment(request: HttpRequest, id: int) -> dict[str, Any]:
    get_deployment(request.user, id)
    return shown(request.user, id)


@router.post("/deployments", response={202: HostedOut, **ERRORS})
def host(request: HttpRequest, payload: HostIn) -> Status[dict[str, Any]]:
    """Host a model: recorded at once (REQUESTED); placing and starting go on in the background."""
    team = hosting_team(request.user, payload.team)
    model = find_model(payload.model)
    chosen: dict[str, dict[str, str]] = {}
    cluster = chosen_cluster(payload, model, chosen)
    name = payload.name
    if name is None:
        name = said(chosen, "name", choosing.name_for(model)).value
    variant = chosen_variant(payload, model, cluster, chosen)
    asked = HostRequest(
        team=team,
        model=model,
        variant=variant,
        cluster=cluster,
        name=name,
        copies=payload.copies,
        accelerators_per_copy=chosen_size(payload, (cluster, model, variant), chosen),
        engine_settings=payload.engine_settings,
        chat_name=payload.chat_name,
        reply_wait_s=payload.reply_wait_s,
        routing=payload.routing,
        revision=payload.revision,
        autoscaling=policy_of(payload.autoscaling),
        movable=payload.movable,
        allow_moves=payload.allow_moves,
        auto_rollback=payload.auto_rollback,
        comment=payload.comment,
    )
    deployment = actions.host(request.user, asked)
    return Status(202, {"id": deployment.pk, "state": deployment.state, "chosen": chosen})


def said(chosen: dict[str, dict[str, str]], field: str, choice: choosing.Choice) -> Any:
    """Record what Berth chose for a field left out, for the answer; gives the choice back."""
    chosen[field] = {"value": str(getattr(choice.value, "name", choice.value)), "why": choice.why}
    return choice


def chosen_cluster(payload: HostIn, model: Model, chosen: dict[str, dict[str, str]]) -> Cluster:
    if payload.cluster is not None:
        return find_cluster(payload.cluster)
    if payload.variant is not None:
        find_variant(model, payload.variant)  # an unknown variant is named before any search
    asked = {"settings": payload.engine_settings, "size": payload.accelerators_per_copy}
    choice = choosing.cluster_for(model, payload.variant, asked)
    if choice.value is None:
        raise ActionRefused(
            f"no cluster can take a copy of {model.repo_id} now ({choice.why}); name one",
            "cluster",
        )
    return said(chosen, "cluster", choice).value


def chosen_variant(
    payload: HostIn, model: Model, cluster: Cluster, chosen: dict[str, dict[str, str]]
) -> Variant:
    if payload.variant is not None:
        return find_variant(model, payload.variant)
    choice = choosing.variant_for(model, cluster)
    if choice.value is None:
        raise ActionRefused(f"{choice.why} Name a variant of {model.repo_id}", "variant")
    return said(chosen, "variant", choice).value


def chosen_size(
    payload: HostIn | FitCheckIn,
    hosting: tuple[Cluster, Model, Variant],
    chosen: dict[str, dict[str, str]] | None = None,
) -> Any:
    if payload.accelerators_per_copy is not None:
        return payload.accelerators_per_copy
    cluster, model, variant = hosting
    settings = actions.checked_settings(payload.engine_settings, cluster)
    choice = choosing.size_for(cluster, model, variant, settings)
    if chosen is not None:
        said(chosen, "accelerators_per_copy", choice)
    return choice.value


def operate(request: HttpRequest, pk: int, act: Callable[[Deployment], Any]) -> dict[str, Any]:
    """Run one action as the user (operators only) and show the deployment after it."""
    act(get_deployment(request.user, pk, NEEDS_OPERATE))
    return shown(request.user, pk)


@router.post("/deployments/{int:id}/scale", response={202: DeploymentOut, **ERRORS})
def scale(request: HttpRequest, id: int, payload: ScaleIn) -> Status[dict[str, Any]]:
    def act(deployment: Deployment) -> Any:
        size = payload.accelerators_per_copy
        return actions.scale(
            request.user,
            deployment,
            payload.copies,
            size,
            allow_moves=payload.allow_moves,
            comment=payload.comment,
        )

    return Status(202, operate(request, id, act))


def policy_of(asked: AutoscalingIn | None) -> dict[str, Any] | None:
    return None if asked is None else asked.model_dump()


@router.post("/deployments/{int:id}/autoscaling", response={200: DeploymentOut, **ERRORS})
def set_autoscaling(request: HttpRequest, id: int, payload: AutoscalingSetIn) -> dict[str, Any]:
    """Scale by itself between bounds, aiming at a load per copy (null: back to a fixed number,
    the one it has now). Copies that serve keep serving: only those outside new bounds start or
    leave. POST …/scale with a fixed number turns autoscaling off too."""

    def act(deployment: Deployment) -> Any:
        policy = policy_of(payload.autoscaling)
        return actions.set_autoscaling(request.user, deployment, policy, payload.comment)

    return operate(request, id, act)


@router.post("/deployments/{int:id}/stop", response={202: DeploymentOut, **ERRORS})
def stop(request: HttpRequest, id: int) -> Status[dict[str, Any]]:
    return Status(202, operate(request, id, lambda d: actions.stop(request.user, d)))


@router.post("/deployments/{int:id}/start", response={202: DeploymentOut, **ERRORS})
def start(request: HttpRequest, id: int) -> Status[dict[str, Any]]:
    return Status(202, operate(request, id, lambda d: actions.start(request.user, d)))


@router.post("/deployments/{int:id}/check", response={202: DeploymentOut, **ERRORS})
def check_now(request: HttpRequest, id: int) -> Status[dict[str, Any]]:
    """Look at it at once; a FAILED deployment starts over."""
    return Status(202, operate(request, id, lambda d: actions.check_now(request.user, d)))


@router.post("/deployments/{int:id}/retry", response={202: DeploymentOut, **ERRORS})
def retry(request: HttpRequest, id: int) -> Status[dict[str, Any]]:
    """Try a FAILED deployment again from the start (start refuses a failed one); any other
    state is refused with 400."""
    return Status(202, operate(request, id, lambda d: actions.retry(request.user, d)))


def files_out(deployment: Deployment, message: str = "") -> dict[str, Any]:
    files = machine_files.summary(deployment)
    machines = [
        {
            "machine": line.machine.name,
            "ready": line.machine.ready,
            "state": line.files.state if line.files else None,
            "progress_bytes": line.files.progress_bytes if line.files else 0,
            "size_bytes": line.files.size_bytes if line.files else 0,
            "message": line.files.message if line.files else "",
        }
        for line in files.lines
    ]
    return {
        "on": files.on,
        "of": files.of,
        "summary": files.words,
        "message": message,
        "machines": machines,
    }


@router.get("/deployments/{int:id}/files", response={200: ModelFilesOut, **ERRORS})
def model_files(request: HttpRequest, id: int) -> dict[str, Any]:
    """On which machines of the cluster the model's files are."""
    return files_out(get_deployment(request.user, id))


@router.post("/deployments/{int:id}/sync", response={202: ModelFilesOut, **ERRORS})
def sync_files(request: HttpRequest, id: int) -> Status[dict[str, Any]]:
    """Copy the model's files to every ready machine that lacks them (and check the others)."""
    deployment = get_deployment(request.user, id, NEEDS_OPERATE)
    said = actions.sync_files(request.user, deployment).words
    return Status(202, files_out(deployment, said))


@router.delete("/deployments/{int:id}", response={202: AcceptedOut, **ERRORS})
def delete(request: HttpRequest, id: int) -> Status[dict[str, Any]]:
    """Stop every copy, then remove the deployment; the model stays on this server."""
    actions.delete(request.user, get_deployment(request.user, id, NEEDS_OPERATE))
    state = Deployment.objects.filter(pk=id).values_list("state", flat=True).first()
    return Status(202, {"id": id, "state": state})


@router.post("/deployments/{int:id}/chat-name", response={200: DeploymentOut, **ERRORS})
def offer_in_chat(request: HttpRequest, id: int, payload: ChatNameIn) -> dict[str, Any]:
    def act(deployment: Deployment) -> Any:
        return actions.offer_in_chat(request.user, deployment, payload.chat_name, payload.comment)

    return operate(request, id, act)


@router.post("/deployments/{int:id}/reply-wait", response={200: DeploymentOut, **ERRORS})
def set_reply_wait(request: HttpRequest, id: int, payload: ReplyWaitIn) -> dict[str, Any]:
    def act(deployment: Deployment) -> Any:
        wait = payload.reply_wait_s
        return actions.set_reply_wait(request.user, deployment, wait, payload.comment)

    return operate(request, id, act)


@router.post("/deployments/{int:id}/routing", response={200: DeploymentOut, **ERRORS})
def set_routing(request: HttpRequest, id: int, payload: RoutingIn) -> dict[str, Any]:
    """How the gateway picks a copy for each request; the copies go on serving as they are."""

    def act(deployment: Deployment) -> Any:
        return actions.set_routing(request.user, deployment, payload.routing, payload.comment)

    return operate(request, id, act)


@router.post("/deployments/{int:id}/queue", response={200: DeploymentOut, **ERRORS})
def set_queue(request: HttpRequest, id: int, payload: QueueIn) -> dict[str, Any]:
    """A queue at the gateway for when every copy is full, rather than sending the requests on
    to engines that are: how many may wait at each gateway process, and for how long."""

    def act(deployment: Deployment) -> Any:
        waiting, wait = payload.max_waiting, payload.queue_wait_s
        return actions.set_queue(request.user, deployment, waiting, wait, payload.comment)

    return operate(request, id, act)


@router.post("/deployments/{int:id}/engine-settings", response={202: DeploymentOut, **ERRORS})
def change_settings(
    request: HttpRequest, id: int, payload: EngineSettingsIn
) -> Status[dict[str, Any]]:
    """New engine settings replace the copies, one generation after the other."""

    def act(deployment: Deployment) -> Any:
        settings = payload.engine_settings
        return actions.change_settings(request.user, deployment, settings, payload.comment)

    return Status(202, operate(request, id, act))


# --- placement: fit checks and estimates ---------------------------------------------------

placement_router = Router(tags=["placement"])


def estimate_out(part: placement.Estimate, max_model_len: int) -> dict[str, Any]:
    return {
        "weights_gb": in_gib(part.weights_bytes),
        "kv_cache_gb": in_gib(part.kv_cache_bytes),
        "activations_gb": in_gib(part.activations_bytes),
        "overhead_gb": in_gib(part.overhead_bytes),
        "total_gb": in_gib(part.total_bytes),
        "total_bytes": part.total_bytes,
        "kv_cache_bytes_per_token": part.kv_bytes_per_token,
        "tensor_parallel": part.tensor_parallel,
        "max_model_len": max_model_len,
    }


def placed_out(placed: placement.Placement) -> dict[str, Any]:
    return {
        "copy_number": placed.copy,
        "machine": placed.machine,
        "accelerators": list(placed.accelerators),
        "slice": placed.slice,
        "allocated_capacity_gb": in_gib(placed.allocated_bytes),
        "gpu_memory_utilization": placed.gpu_memory_utilization,
        "hardware_class": placed.hardware_class,
        "sharing_class": placed.sharing_class,
    }


def fit_check_out(result: placement.PlanResult, max_model_len: int) -> dict[str, Any]:
    return {
        "fit_now": result.fit_now,
        "fit_empty": result.fit_empty,
        "suggested_accelerators_per_copy": result.suggested_accelerators_per_copy,
        "estimate": estimate_out(result.estimate, max_model_len),
        "placed": [placed_out(placed) for placed in result.placed],
        "not_placed": [
            {"copy_number": n.copy, "reason": str(n.reason), "message": n.message}
            for n in result.not_placed
        ],
        "notices": list(result.notices),
    }


def checked_request(
    model: Model, variant: Variant, settings: dict[str, Any], size: Any, copies: int, field: str
) -> placement.PlacementRequest:
    try:
        return placement_request(model, variant, settings, size, copies)
    except ValueError as error:
        raise placement_problem(error, field) from None


@placement_router.post("/fit-check", response={200: FitCheckOut, **ERRORS}, by_alias=True)
def check_fit(request: HttpRequest, payload: FitCheckIn) -> dict[str, Any]:
    """How many copies fit now and on the empty cluster, where they would go, and why the rest
    would not. Nothing is reserved."""
    model = find_model(payload.model)
    variant = find_variant(model, payload.variant)
    cluster = find_cluster(payload.cluster)
    copies = actions.parse_copies(payload.copies)
    size = actions.parse_size(chosen_size(payload, (cluster, model, variant)))
    settings = actions.checked_settings(payload.engine_settings, cluster)
    asked = checked_request(model, variant, settings, size, copies, "accelerators_per_copy")
    if not payload.allow_moves:
        return fit_check_out(fit_check(cluster, asked), asked.max_model_len)
    repack = fit_check_with_moves(cluster, asked)
    answer = fit_check_out(repack.result, asked.max_model_len)
    named = repacking.nameable(request.user, {move.deployment for move in repack.moves})
    answer["moves"] = [move_out(move, named) for move in repack.moves]
    answer["moves_words"] = repacking.moves_told_to(request.user, repack)
    return answer


def move_out(move: Move, named: set[str]) -> dict[str, Any]:
    shown = move.deployment in named
    return {
        "deployment": move.deployment if shown else None,
        "copy": move.copy if shown else None,
        "from": {"machine": move.from_machine, "accelerators": list(move.from_accelerators)},
        "to": {"machine": move.to_machine, "accelerators": list(move.to_accelerators)},
        "gb": in_gib(move.bytes),
    }


@placement_router.post("/estimate", response={200: EstimateOut, **ERRORS})
def estimate_memory(request: HttpRequest, payload: EstimateIn) -> dict[str, Any]:
    """The memory one copy needs on each of its GPUs, in parts (GiB)."""
    model = find_model(payload.model)
    variant = find_variant(model, payload.variant)
    settings = actions.checked_settings(payload.engine_settings, None)
    size = payload.tensor_parallel
    asked = checked_request(model, variant, settings, size, 1, "tensor_parallel")
    try:
        part = estimate(model, variant, settings, size)
    except ValueError as error:
        raise placement_problem(error, "tensor_parallel") from None
    return estimate_out(part, asked.max_model_len)

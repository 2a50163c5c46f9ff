"""The hosting wizard's draft and its rules: what an operator chose so far, the defaults it
starts from (the first size that holds a copy, a unique name, the chat name), the fit check of
the choice, and the host request it becomes. The wizard's pages keep drafts in the session."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Q

from catalog.models import Model, ServerModel, ServerModelState, Variant
from clusters.models import Cluster
from console.models import Team
from deployments import actions, choosing, fit_words, repacking
from deployments.engine.variant_advice import hardware_of
from deployments.fit_words import size_text
from deployments.placing import fit_check_with_moves, for_cluster, placement_request
from deployments.snapshot import inventory_for

STEPS = ("model", "where", "settings", "review")
STEP_TITLES = {
    "model": "Model",
    "where": "Where",
    "settings": "Engine settings",
    "review": "Review",
}


@dataclass
class Draft:
    """What the operator chose so far; stored as a plain dict in the session."""

    id: str
    with_model_step: bool = True
    model_id: int | None = None
    variant_id: int | None = None
    variant_chosen: bool = False  # advanced mode picked it; novice mode picks by hardware
    cluster_id: int | None = None
    size: str = ""
    copies: int = 1
    settings: dict[str, Any] = field(default_factory=dict)
    settings_touched: bool = False  # the operator saw the editor: keep their settings
    preset: str = "balanced"
    name: str = ""
    chat_name: str | None = None  # None: not proposed yet
    revision: str = ""
    team_id: int | None = None
    autoscaling: dict[str, Any] | None = None  # the API's object; None: a fixed number
    allow_moves: bool = False  # the operator accepted the moves the fit check offered
    touched_at: float = 0.0
    # Said once on the next page (what a preset changed, a capped share): every valid POST
    # redirects, so the browser's back and forward only ever revisit GETs.
    flash: dict[str, list[str]] = field(default_factory=dict)

    def steps(self) -> list[str]:
        return list(STEPS if self.with_model_step else STEPS[1:])

    @property
    def model(self) -> Model | None:
        return Model.objects.filter(pk=self.model_id).first() if self.model_id else None

    @property
    def variant(self) -> Variant | None:
        if not self.variant_id:
            return None
        return Variant.objects.filter(pk=self.variant_id, model_id=self.model_id).first()

    @property
    def cluster(self) -> Cluster | None:
        return Cluster.objects.filter(pk=self.cluster_id).first() if self.cluster_id else None


def choose_model(draft: Draft, model: Model) -> None:
    if draft.model_id != model.pk:
        draft.model_id, draft.variant_id, draft.variant_chosen = model.pk, None, False
        draft.settings, draft.settings_touched, draft.preset = {}, False, "balanced"
        draft.name, draft.chat_name = "", None


def models_on_this_server(query: str) -> list[Model]:
    kept = ServerModel.objects.filter(state=ServerModelState.READY).values("variant__model_id")
    models = Model.objects.filter(pk__in=kept)
    if query:
        models = models.filter(
            Q(name__icontains=query) | Q(repo_id__icontains=query) | Q(family__icontains=query)
        )
    return list(models.order_by("family", "name"))


def first_size(draft: Draft) -> str:
    """The size the fit check starts from: the one Berth chooses when a request leaves it open."""
    model, variant, cluster = draft.model, draft.variant, draft.cluster
    if not (model and variant and cluster):
        return "1"
    return size_text(choosing.size_for(cluster, model, variant, draft.settings).value)


def fit_for(draft: Draft) -> fit_words.FitWords | None:
    model, variant, cluster = draft.model, draft.variant, draft.cluster
    if not (model and variant and cluster and draft.size):
        return None
    try:
        asked = placement_request(model, variant, draft.settings, Decimal(draft.size), draft.copies)
    except ValueError as error:
        return fit_words.invalid(error)
    asked = for_cluster(cluster, asked)
    return fit_words.check(inventory_for(cluster), asked, hardware_of(cluster))


def moves_for(draft: Draft, fit: fit_words.FitWords | None, user: Any) -> str:
    """When not every copy fits now: the moves of other copies after which they would, in
    words for this user, for the operator to accept ("" when none would)."""
    if fit is None or fit.level not in ("partial", "none_now") or fit.fit_empty < draft.copies:
        return ""
    asked = placement_request(
        draft.model, draft.variant, draft.settings, Decimal(draft.size), draft.copies
    )
    repack = fit_check_with_moves(draft.cluster, asked)  # type: ignore[arg-type]
    return repacking.moves_offered(user, repack)


def ready_for_settings(draft: Draft) -> bool:
    return bool(draft.model and draft.variant and draft.cluster and draft.size)


def proposed_name(model: Model | None) -> str:
    return str(choosing.name_for(model).value)


def proposed_chat_name(model: Model | None, name: str) -> str:
    """The model's own short name, as people would type it in the chat."""
    candidate = (model.repo_id.split("/")[-1].lower() if model else "") or name
    if actions.chat_name_taken(candidate, name):
        return name
    return candidate


def host_request(draft: Draft, team: Team) -> actions.HostRequest:
    return actions.HostRequest(
        team=team,
        model=draft.model,  # type: ignore[arg-type]
        variant=draft.variant,  # type: ignore[arg-type]
        cluster=draft.cluster,  # type: ignore[arg-type]
        name=draft.name,
        copies=draft.copies,
        accelerators_per_copy=draft.size,
        engine_settings=draft.settings,
        chat_name=draft.chat_name or "",
        revision=draft.revision,
        autoscaling=draft.autoscaling,
        allow_moves=draft.allow_moves,
    )

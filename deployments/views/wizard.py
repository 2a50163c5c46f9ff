"""The hosting wizard: Model → Where → Engine settings → Review → Host.

Three entry points open it: Host on a model's page (?model=ID), Deploy on a cluster's page
(?cluster=ID) and Deploy under Deployments (no parameter: it starts with a Model step). The draft
is kept server-side in the session, keyed by a draft id in the URL, so back and forward keep every
value, a reload loses nothing, and two tabs never mix their drafts. Host calls actions.host and
lands on the deployment's page: nothing waits in the wizard.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import asdict
from decimal import Decimal
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from catalog.models import Model
from clusters.models import Cluster
from console.access import operated_teams, require_operator_somewhere
from deployments import actions, choosing
from deployments.autoscaling import DEFAULT_TARGET_IN_FLIGHT
from deployments.drafts import (
    STEP_TITLES,
    Draft,
    choose_model,
    first_size,
    fit_for,
    host_request,
    models_on_this_server,
    moves_for,
    proposed_chat_name,
    proposed_name,
    ready_for_settings,
)
from deployments.engine import presets, suggestions
from deployments.engine.variant_advice import advise, hardware_of
from deployments.fit_words import size_choices, size_text
from deployments.forms import ReviewForm, WhereForm
from deployments.placing import placement_request
from deployments.views import editor

DRAFTS_KEY = "berth_wizard_drafts"
MAX_DRAFTS = 20
DRAFT_ID = re.compile(r"^[0-9a-f]{16}$")


# --- drafts in the session ---------------------------------------------------------------------


def drafts(request: HttpRequest) -> dict[str, dict[str, Any]]:
    stored = request.session.get(DRAFTS_KEY)
    return stored if isinstance(stored, dict) else {}


def load(request: HttpRequest, draft_id: str) -> Draft:
    data = drafts(request).get(draft_id) if DRAFT_ID.match(draft_id) else None
    if data is None:
        raise Http404("This draft is gone (it was hosted, or it expired): start again.")
    known = {name for name in Draft.__dataclass_fields__}
    return Draft(**{k: v for k, v in data.items() if k in known})


def store(request: HttpRequest, draft: Draft) -> None:
    """Save the draft; the oldest drafts go once a user has more than MAX_DRAFTS."""
    draft.touched_at = time.time()
    kept = drafts(request)
    kept[draft.id] = asdict(draft)
    if len(kept) > MAX_DRAFTS:
        for old in sorted(kept, key=lambda k: kept[k].get("touched_at", 0))[:-MAX_DRAFTS]:
            kept.pop(old)
    request.session[DRAFTS_KEY] = kept


def forget(request: HttpRequest, draft_id: str) -> None:
    kept = drafts(request)
    kept.pop(draft_id, None)
    request.session[DRAFTS_KEY] = kept


def step_url(draft: Draft, step: str) -> str:
    return reverse(f"wizard_{step}", args=[draft.id])


# --- the entry points --------------------------------------------------------------------------


@never_cache
def start(request: HttpRequest) -> HttpResponse:
    """A new draft, from ?model=ID, ?cluster=ID or nothing; then its first step."""
    require_operator_somewhere(request.user)
    draft = Draft(id=secrets.token_hex(8))
    model = number(request.GET.get("model"))
    cluster = number(request.GET.get("cluster"))
    if model is not None:
        if not Model.objects.filter(pk=model).exists():
            raise Http404("No such model in the catalog.")
        draft.with_model_step = False
        choose_model(draft, Model.objects.get(pk=model))
    if cluster is not None:
        if not Cluster.objects.filter(pk=cluster).exists():
            raise Http404("No such cluster.")
        draft.cluster_id = cluster
    teams = operated_teams(request.user)
    draft.team_id = teams[0].pk if teams else None
    store(request, draft)
    return redirect(step_url(draft, draft.steps()[0]))


def number(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() else None


@require_POST
def set_mode(request: HttpRequest) -> HttpResponse:
    """Novice or advanced: remembered for the user's session, for the wizard and the editor."""
    mode = request.POST.get("mode", "")
    if mode in editor.MODES:
        request.session[editor.MODE_KEY] = mode
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, {request.get_host()}):
        target = reverse("deployment_list")
    return redirect(target)


def page(request: HttpRequest, draft: Draft, step: str, template: str, **context: Any) -> Any:
    context.update(
        draft=draft,
        step=step,
        steps=[(s, STEP_TITLES[s]) for s in draft.steps()],
        mode=editor.mode_of(request),
        model=draft.model,
        variant=draft.variant,
        cluster=draft.cluster,
    )
    return render(request, f"deployments/wizard/{template}", context)


# --- Model ---------------------------------------------------------------------------------------


@never_cache
def model_step(request: HttpRequest, draft_id: str) -> HttpResponse:
    require_operator_somewhere(request.user)
    draft = load(request, draft_id)
    error = ""
    if request.method == "POST":
        chosen = Model.objects.filter(pk=number(request.POST.get("model"))).first()
        if chosen is not None:
            choose_model(draft, chosen)
            store(request, draft)
            return redirect(step_url(draft, "where"))
        error = "Choose one of the models."
    query = request.GET.get("q", "").strip()
    models = models_on_this_server(query)
    return page(request, draft, "model", "model.html", models=models, query=query, error=error)


# --- Where ---------------------------------------------------------------------------------------


def prepare_where(draft: Draft, mode: str) -> None:
    """Defaults for what Where has not been told yet: a cluster, a variant, settings, a size."""
    if draft.cluster_id is None:
        first = Cluster.objects.order_by("name").first()
        draft.cluster_id = first.pk if first else None
    model, cluster = draft.model, draft.cluster
    if model and cluster and (mode == "novice" or not draft.variant_chosen or not draft.variant):
        chosen = choosing.variant_for(model, cluster).value
        draft.variant_id = chosen.pk if chosen else None
    if model and not draft.settings_touched and draft.variant:
        draft.settings = initial_settings(draft)
    if not draft.size:
        draft.size = first_size(draft)


def editor_where(draft: Draft) -> editor.Where:
    return editor.Where(
        model=draft.model,  # type: ignore[arg-type]
        variant=draft.variant,  # type: ignore[arg-type]
        cluster=draft.cluster,
        size=float(Decimal(draft.size or "1")),
        served_name=draft.name or proposed_name(draft.model),  # type: ignore[arg-type]
        revision=draft.revision,
    )


def initial_settings(draft: Draft) -> dict[str, Any]:
    """The editor pre-filled: the suggestions, tuned for the draft's preset (Balanced)."""
    context = editor_where(draft).context()
    suggested = suggestions.suggested_settings(context)
    return presets.apply(draft.preset or "balanced", suggested, context)


def where_form(request: HttpRequest, draft: Draft, data: Any = None, fit: Any = None) -> WhereForm:
    model = draft.model
    suggestion = fit.suggestion if fit else ""
    return WhereForm(
        data,
        initial={
            "cluster": draft.cluster_id,
            "variant": draft.variant_id,
            "size": draft.size,
            "copies": draft.copies,
        },
        clusters=Cluster.objects.order_by("name"),
        variants=model.variants.all() if model else [],
        sizes=size_choices(draft.size, suggestion),
    )


def variant_guidance(draft: Draft) -> list[Any]:
    model, cluster = draft.model, draft.cluster
    if not (model and cluster):
        return []
    hardware, context = hardware_of(cluster), fit_context(draft)
    return [advise(model, variant, hardware, context) for variant in model.variants.all()]


def fit_context(draft: Draft) -> int | None:
    """The conversation length the fit check of the draft reckons with, for the guidance beside
    it to quote the same one."""
    if not (draft.model and draft.variant):
        return None
    try:
        asked = placement_request(draft.model, draft.variant, draft.settings, 1, 1)
    except ValueError:
        return None
    return asked.max_model_len


def read_where(request: HttpRequest, draft: Draft, mode: str) -> WhereForm:
    """Take what the Where form says into the draft (valid fields only)."""
    form = where_form(request, draft, request.POST)
    form.is_valid()
    data = form.cleaned_data
    if "cluster" in data and data["cluster"] != draft.cluster_id:
        draft.cluster_id = data["cluster"]
        draft.variant_chosen = draft.variant_chosen and mode == "advanced"
    if mode == "advanced" and data.get("variant"):
        if data["variant"] != draft.variant_id:
            draft.variant_id, draft.variant_chosen = data["variant"], True
    if "size" in data:
        draft.size = size_text(data["size"])
    if "copies" in data:
        draft.copies = data["copies"]
    draft.allow_moves = request.POST.get("allow_moves") == "on"
    applied = request.POST.get("apply_size", "")
    if applied:
        try:
            draft.size = size_text(actions.parse_size(applied))
        except actions.ActionRefused:
            pass
    prepare_where(draft, mode)
    return form


@never_cache
def where_step(request: HttpRequest, draft_id: str) -> HttpResponse:
    require_operator_somewhere(request.user)
    draft = load(request, draft_id)
    if draft.model is None:
        return redirect(step_url(draft, "model"))
    mode = editor.mode_of(request)
    if request.method == "POST":
        form = read_where(request, draft, mode)
        store(request, draft)
        action = request.POST.get("action", "")
        if action == "back" and draft.with_model_step:
            return redirect(step_url(draft, "model"))
        if action == "next" and form.is_valid():
            return redirect(step_url(draft, "settings"))
        if action == "next":
            fit = fit_for(draft)
            return where_page(
                request, draft, mode, where_form(request, draft, request.POST, fit), fit
            )
        return redirect(step_url(draft, "where"))
    prepare_where(draft, mode)
    store(request, draft)
    return where_page(request, draft, mode)


def where_page(
    request: HttpRequest, draft: Draft, mode: str, form: WhereForm | None = None, fit: Any = None
) -> HttpResponse:
    fit = fit or fit_for(draft)
    return page(
        request,
        draft,
        "where",
        "where.html",
        form=form or where_form(request, draft, fit=fit),
        fit=fit,
        moves=moves_for(draft, fit, request.user),
        **variant_words(draft),
    )


def variant_words(draft: Draft) -> dict[str, Any]:
    """The VRAM guidance per variant, and why novice mode picks the one it picks."""
    model, cluster = draft.model, draft.cluster
    why = choosing.variant_for(model, cluster).why if model and cluster else ""
    return {"guidance": variant_guidance(draft), "picked_why": why}


@require_POST
def fit(request: HttpRequest, draft_id: str) -> HttpResponse:
    """The fit check for the Where form as it is now (htmx); the values are kept in the draft."""
    require_operator_somewhere(request.user)
    draft = load(request, draft_id)
    read_where(request, draft, editor.mode_of(request))
    store(request, draft)
    mode = editor.mode_of(request)
    fit = fit_for(draft)
    context = {
        "fit": fit,
        "moves": moves_for(draft, fit, request.user),
        "draft": draft,
        "mode": mode,
        "variant": draft.variant,
        "form": where_form(request, draft),
        **variant_words(draft),
    }
    return render(request, "deployments/wizard/_fit_response.html", context)


# --- Engine settings -----------------------------------------------------------------------------


@never_cache
def settings_step(request: HttpRequest, draft_id: str) -> HttpResponse:
    require_operator_somewhere(request.user)
    draft = load(request, draft_id)
    if not ready_for_settings(draft):
        return redirect(step_url(draft, "where"))
    where = editor_where(draft)
    if request.method != "POST":
        state = editor.build_state(where, draft.settings, editor.mode_of(request))
        state.notices = draft.flash.pop("notices", [])
        state.preset_changed = draft.flash.pop("changed", [])
        store(request, draft)
        return settings_page(request, draft, state)
    result = editor.read_post(request, where, draft.settings)
    action = request.POST.get("action", "")
    if not result.valid:
        if action == "back":
            return redirect(step_url(draft, "where"))
        return settings_page(request, draft, result.state)  # what was typed, with its errors
    draft.settings, draft.settings_touched = result.state.settings, True
    draft.flash = {"notices": result.state.notices, "changed": result.state.preset_changed}
    store(request, draft)
    if action == "back":
        return redirect(step_url(draft, "where"))
    if action == "next" and not result.state.notices:
        return redirect(step_url(draft, "review"))
    return redirect(step_url(draft, "settings"))


def settings_page(request: HttpRequest, draft: Draft, state: editor.EditorState) -> HttpResponse:
    return page(
        request,
        draft,
        "settings",
        "settings.html",
        editor=state,
        flag_query=request.GET.get("flag_q", ""),
        all_flags=state.flags(request.GET.get("flag_q", "")),
        check_url=reverse("wizard_settings_check", args=[draft.id]),
    )


@require_POST
def settings_check(request: HttpRequest, draft_id: str) -> HttpResponse:
    """Warnings and preview for the editor's controls as they are now (htmx; kept in the draft)."""
    require_operator_somewhere(request.user)
    draft = load(request, draft_id)
    if not ready_for_settings(draft):
        raise Http404("Choose where it runs first.")
    result = editor.read_post(request, editor_where(draft), draft.settings)
    if result.valid:
        draft.settings, draft.settings_touched = result.state.settings, True
        store(request, draft)
    return render(request, "deployments/editor/_check.html", {"editor": result.state})


# --- Review and Host -----------------------------------------------------------------------------


def review_form(request: HttpRequest, draft: Draft, data: Any = None) -> ReviewForm:
    if not draft.name:
        draft.name = proposed_name(draft.model)
    if draft.chat_name is None:
        draft.chat_name = proposed_chat_name(draft.model, draft.name)
    initial = {
        "name": draft.name,
        "chat_name": draft.chat_name,
        "revision": draft.revision,
        "team": draft.team_id,
        **autoscaling_initial(draft),
    }
    return ReviewForm(data, initial=initial, teams=operated_teams(request.user))


def autoscaling_initial(draft: Draft) -> dict[str, Any]:
    chosen = draft.autoscaling or {}
    return {
        "autoscale": draft.autoscaling is not None,
        "min_copies": chosen.get("min_copies", draft.copies),
        "max_copies": chosen.get("max_copies", draft.copies + 1),
        "target_in_flight": chosen.get("target_in_flight", DEFAULT_TARGET_IN_FLIGHT),
        "idle_minutes": chosen.get("idle_minutes"),
    }


def read_review(draft: Draft, form: ReviewForm) -> None:
    form.is_valid()
    data = form.cleaned_data
    draft.name = data.get("name", draft.name).strip()
    draft.chat_name = data.get("chat_name", draft.chat_name or "").strip()
    draft.revision = data.get("revision", draft.revision).strip()
    draft.team_id = data.get("team", draft.team_id)
    if "autoscale" in form.data or "min_copies" in form.data:  # advanced mode showed them
        draft.autoscaling = form.autoscaling()


@never_cache
def review_step(request: HttpRequest, draft_id: str) -> HttpResponse:
    require_operator_somewhere(request.user)
    draft = load(request, draft_id)
    if not ready_for_settings(draft):
        return redirect(step_url(draft, "where"))
    if request.method != "POST":
        form = review_form(request, draft)
        store(request, draft)
        return review_page(request, draft, form)
    form = review_form(request, draft, request.POST)
    read_review(draft, form)
    store(request, draft)
    if request.POST.get("action") == "back":
        return redirect(step_url(draft, "settings"))
    if not form.is_valid():
        return review_page(request, draft, form)
    return host(request, draft, form)


def host(request: HttpRequest, draft: Draft, form: ReviewForm) -> HttpResponse:
    team = next((t for t in operated_teams(request.user) if t.pk == draft.team_id), None)
    if team is None:
        form.add_error("team", "Pick a team you may host in.")
        return review_page(request, draft, form)
    try:
        deployment = actions.host(request.user, host_request(draft, team))
    except actions.ActionRefused as refused:
        field = refused.field.removeprefix("autoscaling.")
        field_name = field if field in form.fields else None
        form.add_error(field_name, refused.message)
        return review_page(request, draft, form)
    forget(request, draft.id)
    return redirect("deployment_detail", pk=deployment.pk)


def review_page(request: HttpRequest, draft: Draft, form: ReviewForm) -> HttpResponse:
    state = editor.build_state(editor_where(draft), draft.settings, editor.mode_of(request))
    fit = fit_for(draft)
    return page(
        request,
        draft,
        "review",
        "review.html",
        form=form,
        fit=fit,
        moves=moves_for(draft, fit, request.user) if draft.allow_moves else "",
        editor=state,
        size=draft.size,
        single_team=len(form.fields["team"].choices) == 1,
    )

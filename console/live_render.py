"""What a live consumer sends its user: the partials of a page, rendered for that user."""

from __future__ import annotations

from typing import Any

from django.http import QueryDict
from django.template.loader import render_to_string

from console import live, overview
from deployments.access import visible_deployments
from deployments.forms import DeploymentFilter
from deployments.views import partials


def out_of_band(csrf_token: str) -> dict[str, Any]:
    """What a partial sent over a socket needs beyond the page's context: it swaps itself in."""
    return {"csrf_token": csrf_token, "oob": True}


def deployment_parts(user: Any, deployment_id: int, csrf_token: str) -> str:
    deployment = visible_deployments(user).filter(pk=deployment_id).first()
    if deployment is None:
        return ""
    context = {**partials.health_and_copies(user, deployment), **out_of_band(csrf_token)}
    return render_to_string("deployments/_health.html", context) + render_to_string(
        "deployments/_copies.html", context
    )


def machine_files(user: Any, deployment_id: int, csrf_token: str) -> str:
    """The Machines and model files panel of a deployment's page."""
    deployment = visible_deployments(user).filter(pk=deployment_id).first()
    if deployment is None:
        return ""
    context = {**partials.files_on_machines(user, deployment), **out_of_band(csrf_token)}
    return render_to_string("deployments/_machine_files.html", context)


def deployment_row(user: Any, deployment_id: int, csrf_token: str) -> str:
    rows = partials.list_rows(user, visible_deployments(user).filter(pk=deployment_id))
    if not rows:
        return ""
    context = {"row": rows[0], **out_of_band(csrf_token)}
    return render_to_string("deployments/_row.html", context)


def deployment_added(user: Any, deployment_id: int, csrf_token: str, query: str) -> str:
    """A new deployment's row, on top of an open list whose filters (the socket's query, as
    the page's) it passes; and the list's empty note gone."""
    listed = DeploymentFilter(QueryDict(query)).apply(visible_deployments(user))
    rows = partials.list_rows(user, listed.filter(pk=deployment_id))
    if not rows:
        return ""
    context = {"row": rows[0], "csrf_token": csrf_token}
    return render_to_string("deployments/_row_added.html", context)


def fleet_overview(user: Any) -> str:
    """The whole overview again, rendered for its user."""
    context = {**overview.overview(user), "oob": True}
    return render_to_string("console/_overview.html", context)


def log_replay_start(user: Any, deployment_id: int, after: int) -> int:
    from deployments.log_search import replay_start

    if not visible_deployments(user).filter(pk=deployment_id).exists():
        return after
    return replay_start(deployment_id, after)


def engine_figures(user: Any, deployment_id: int) -> str:
    if not visible_deployments(user).filter(pk=deployment_id).exists():
        return ""
    context = {**partials.engine_figures(deployment_id), "oob": True}
    return render_to_string("deployments/_engine_figures.html", context)


def server_model_row(user: Any, server_model_id: int, csrf_token: str) -> str:
    from catalog.models import ServerModel
    from catalog.views import permissions_of

    row = ServerModel.objects.select_related("variant__model", "team").filter(pk=server_model_id)
    if not row:
        return ""
    context = {"row": row[0], "oob": True, "csrf_token": csrf_token, **permissions_of(user)}
    return render_to_string("catalog/_server_model_row.html", context)


def variant_files(model_id: int, server_model_id: int) -> str:
    """The On this server cell of the download's variant, on its model's page."""
    from catalog.models import ServerModel, Variant

    variant = Variant.objects.filter(model_id=model_id, server_copies=server_model_id).first()
    if variant is None:
        return ""
    copies = ServerModel.objects.filter(variant=variant)
    context = {"v": variant, "server_copies": copies, "oob": True}
    return render_to_string("catalog/_variant_files.html", context)


def catch_up(user: Any, group: str, csrf_token: str) -> str:
    """What a socket that just (re)connected sends at once: the page may have been rendered
    before a change whose broadcast went out while the socket was still connecting."""
    if group == live.FLEET_GROUP:
        return fleet_overview(user)
    kind, _, ident = group.partition("-")
    if kind != "deployment" or not ident.isdigit():
        return ""  # logs resume after their last seq; list pages are small to reload
    deployment_id = int(ident)
    return deployment_parts(user, deployment_id, csrf_token) + machine_files(
        user, deployment_id, csrf_token
    )


def render(user: Any, group: str, message: dict[str, Any], csrf_token: str, query: str = "") -> str:
    """The HTML a socket of `group` sends for a message; `query` is the socket's query string
    (a list's filters)."""
    kind, ident = message["kind"], message["id"]
    if group == live.FLEET_GROUP:
        return fleet_overview(user)
    if group == "deployments" and kind == live.DEPLOYMENT_ADDED:
        return deployment_added(user, ident, csrf_token, query)
    if kind == "server_model" and group == live.MODELS_GROUP:
        return server_model_row(user, ident, csrf_token)
    if kind == "server_model" and group.startswith("model-"):
        return variant_files(int(group.split("-")[1]), ident)
    if kind == "figures" and group == f"deployment-{ident}":
        return engine_figures(user, ident)
    if group == "deployments" and kind == "deployment":
        return deployment_row(user, ident, csrf_token)
    if kind == "files" and group.startswith("deployment-"):
        return machine_files(user, int(group.split("-")[1]), csrf_token)
    if group.startswith("deployment-") and kind in ("deployment", "copy"):
        return deployment_parts(user, int(group.split("-")[1]), csrf_token)
    return ""

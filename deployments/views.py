"""Deployment pages: the list, a deployment's page, and the operator's actions as plain forms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from catalog.models import Model
from clusters.models import Cluster
from console.access import NEEDS_OPERATE, get_deployment, operates_team, visible_deployments
from deployments import actions, engine_figures, machine_files
from deployments.choices import DEPLOYMENT_ACTIVE, DEPLOYMENT_SERVING, CopyState, DeploymentState
from deployments.models import Deployment, Reservation

STATE_GROUPS = {
    "active": DEPLOYMENT_ACTIVE,
    "serving": DEPLOYMENT_SERVING,
    "failed": {DeploymentState.FAILED, DeploymentState.ERROR, DeploymentState.MUST_REDOWNLOAD},
    "stopped": {DeploymentState.STOPPING, DeploymentState.STOPPED},
}


def filter_deployments(deployments: QuerySet[Deployment], params: Any) -> QuerySet[Deployment]:
    state = params.get("state", "")
    if state in STATE_GROUPS:
        deployments = deployments.filter(state__in=STATE_GROUPS[state])
    elif state in DeploymentState.values:
        deployments = deployments.filter(state=state)
    if params.get("cluster", "").isdigit():
        deployments = deployments.filter(cluster_id=int(params["cluster"]))
    if params.get("model", "").isdigit():
        deployments = deployments.filter(model_id=int(params["model"]))
    if params.get("q"):
        query = params["q"]
        deployments = deployments.filter(Q(name__icontains=query) | Q(chat_name__icontains=query))
    return deployments


def deployment_list(request: HttpRequest) -> HttpResponse:
    visible = visible_deployments(request.user)
    deployments = filter_deployments(visible, request.GET).annotate(
        copies_ready=Count("copies", filter=Q(copies__state=CopyState.READY))
    )
    rows = list(deployments.order_by("name"))
    for row in rows:
        row.can_operate = operates_team(request.user, row.team_id)
    context = {
        "deployments": rows,
        "any_at_all": visible.exists(),
        "params": request.GET,
        "state_groups": list(STATE_GROUPS),
        "states": DeploymentState.choices,
        "clusters": Cluster.objects.filter(deployments__in=visible).distinct().order_by("name"),
        "models": Model.objects.filter(deployments__in=visible).distinct().order_by("name"),
    }
    return render(request, "deployments/list.html", context)


def copies_with_placement(deployment: Deployment) -> list[Any]:
    copies = list(deployment.copies.select_related("machine").order_by("ordinal"))
    held = Reservation.objects.filter(copy__deployment=deployment).select_related(
        "accelerator__parent"
    )
    by_copy: dict[int, list[str]] = {}
    for row in held:
        gpu = row.accelerator
        if gpu is not None:
            where = (
                f"{gpu.parent.index} (MIG {gpu.mig_profile})" if gpu.parent_id else str(gpu.index)
            )
            by_copy.setdefault(row.copy_id, []).append(where)
    for copy in copies:
        copy.gpus = ", ".join(by_copy.get(copy.pk, [])) or "—"
    return copies


def deployment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_deployment(request.user, pk)
    context = {
        "deployment": deployment,
        "copies": copies_with_placement(deployment),
        "copies_ready": deployment.copies.filter(state=CopyState.READY).count(),
        "files": machine_files.summary(deployment),
        "events": deployment.events.select_related("actor")[:50],
        "can_operate": operates_team(request.user, deployment.team_id),
        "figures": engine_figures.summary(deployment.pk),
        "every": settings.METRICS_EVERY_S,
        "default_reply_wait": settings.GATEWAY_REPLY_WAIT_S,
    }
    return render(request, "deployments/detail.html", context)


FIELD_LABELS = {"reply_wait_s": "reply wait", "chat_name": "chat name", "copies": "copies"}


def said_by_action(words: str) -> str:
    return words


def operate(
    request: HttpRequest,
    pk: int,
    act: Callable[[Deployment], Any],
    done: str | Callable[[Any], str],
) -> HttpResponse:
    """Run one action as the user (operators only) and say what happened."""
    deployment = get_deployment(request.user, pk, NEEDS_OPERATE)
    try:
        result = act(deployment)
    except actions.ActionRefused as refused:
        label = FIELD_LABELS.get(refused.field, refused.field.replace("_", " "))
        field = f"{label}: " if refused.field else ""
        messages.error(request, f"Not done: {field}{refused.message}.")
        return redirect("deployment_detail", pk=pk)
    messages.success(request, done if isinstance(done, str) else done(result))
    if not Deployment.objects.filter(pk=pk).exists():
        return redirect("deployment_list")
    return redirect("deployment_detail", pk=pk)


@require_POST
def scale(request: HttpRequest, pk: int) -> HttpResponse:
    copies = request.POST.get("copies", "")
    size = request.POST.get("accelerators_per_copy", "")
    return operate(
        request,
        pk,
        lambda d: actions.scale(request.user, d, copies, size or None),
        f"Scaling to {copies} copies.",
    )


def confirm(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Stop and Delete ask first, on a page of their own (JavaScript or not)."""
    deployment = get_deployment(request.user, pk, NEEDS_OPERATE)
    copies = deployment.copies.exclude(state__in=[CopyState.STOPPED]).count()
    context = {"deployment": deployment, "action": action, "copies": copies}
    return render(request, "deployments/confirm.html", context)


@require_http_methods(["GET", "POST"])
def stop(request: HttpRequest, pk: int) -> HttpResponse:
    if request.method == "GET":
        return confirm(request, pk, "stop")
    return operate(request, pk, lambda d: actions.stop(request.user, d), "Stopping every copy.")


@require_POST
def start(request: HttpRequest, pk: int) -> HttpResponse:
    return operate(request, pk, lambda d: actions.start(request.user, d), "Starting again.")


@require_http_methods(["GET", "POST"])
def delete(request: HttpRequest, pk: int) -> HttpResponse:
    if request.method == "GET":
        return confirm(request, pk, "delete")
    return operate(
        request,
        pk,
        lambda d: actions.delete(request.user, d),
        "Deleting: the copies stop, then the deployment goes. The model stays on this server.",
    )


@require_POST
def check_now(request: HttpRequest, pk: int) -> HttpResponse:
    return operate(request, pk, lambda d: actions.check_now(request.user, d), "Checking now.")


@require_POST
def sync_files(request: HttpRequest, pk: int) -> HttpResponse:
    return operate(request, pk, lambda d: actions.sync_files(request.user, d), said_by_action)


@require_POST
def offer_in_chat(request: HttpRequest, pk: int) -> HttpResponse:
    name = request.POST.get("chat_name", "")
    done = (
        f"Offered in chat as {name.strip()}." if name.strip() else "Not offered in chat any more."
    )
    return operate(request, pk, lambda d: actions.offer_in_chat(request.user, d, name), done)


@require_POST
def reply_wait(request: HttpRequest, pk: int) -> HttpResponse:
    seconds = request.POST.get("reply_wait_s", "")
    done = f"A reply must now start within {seconds} s." if seconds else "Reply wait: the default."
    return operate(request, pk, lambda d: actions.set_reply_wait(request.user, d, seconds), done)

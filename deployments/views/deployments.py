"""Deployment pages: the list, a deployment's page, and the operator's actions as plain forms."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from catalog.models import Model
from clusters.models import Cluster
from console.access import NEEDS_OPERATE
from console.lists import headings, pager
from deployments import actions, autoscaling
from deployments.access import get_deployment, visible_deployments
from deployments.choices import DEPLOYMENT_GROUPS, CopyState, DeploymentState
from deployments.forms import AutoscalingForm, BulkForm, DeploymentFilter
from deployments.models import Deployment
from deployments.views import partials
from gateway import cost

# The headings of the list's table (templates/partials/list_table.html), each with the order
# it sorts by (DeploymentFilter.orders), or none.
DEPLOYMENT_COLUMNS = (
    ("Select", ""),
    ("Name", "name"),
    ("State", "state"),
    ("Copies ready / wanted", ""),
    ("Model", "model"),
    ("Cluster", "cluster"),
    ("Team", "team"),
    ("In chat", ""),
    ("Last message", ""),
    ("", ""),  # the row's actions
)


def deployment_list(request: HttpRequest) -> HttpResponse:
    visible = visible_deployments(request.user)
    filters = DeploymentFilter(request.GET)
    shown, cursor_error = filters.page_leniently(partials.with_ready_counts(filters.apply(visible)))
    context = {
        "columns": headings(DEPLOYMENT_COLUMNS, filters, request.GET),
        "deployments": partials.for_user(request.user, shown.rows),
        **pager(shown, cursor_error, request.GET),
        "any_at_all": visible.exists(),
        "params": request.GET,
        "state_groups": list(DEPLOYMENT_GROUPS),
        "states": DeploymentState.choices,
        "clusters": Cluster.objects.filter(deployments__in=visible).distinct().order_by("name"),
        "models": Model.objects.filter(deployments__in=visible).distinct().order_by("name"),
    }
    return render(request, "deployments/list.html", context)


def deployment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    deployment = get_deployment(request.user, pk)
    context = {
        **partials.health_and_copies(request.user, deployment),
        **partials.files_on_machines(request.user, deployment),
        **partials.engine_figures(deployment.pk),
        **partials.autoscaling_panel(deployment),
        "events": deployment.events.select_related("actor")[:50],
        "cost": cost.deployment_costs([deployment.pk])[deployment.pk],
    }
    return render(request, "deployments/detail.html", context)


FIELD_LABELS = {
    "reply_wait_s": "reply wait",
    "chat_name": "chat name",
    "copies": "copies",
    "routing": "routing",
    "max_waiting": "queue",
    "queue_wait_s": "queue wait",
}
FIELD_LABELS |= {f"autoscaling.{name}": name.replace("_", " ") for name in autoscaling.FIELDS}


def operate(
    request: HttpRequest,
    pk: int,
    act: Callable[[Deployment], actions.Done],
    back_to: str = "deployment_detail",
) -> HttpResponse:
    """Run one action as the user (operators only) and show what it says it did, on the page
    named `back_to` (the deployment's own by default)."""
    deployment = get_deployment(request.user, pk, NEEDS_OPERATE)
    try:
        done = act(deployment)
    except actions.ActionRefused as refused:
        label = FIELD_LABELS.get(refused.field, refused.field.replace("_", " "))
        field = f"{label}: " if refused.field else ""
        messages.error(request, f"Not done: {field}{refused.message}.")
        return redirect(back_to, pk=pk)
    messages.success(request, done.words)
    if done.deployment is None:
        return redirect("deployment_list")
    return redirect(back_to, pk=pk)


@require_POST
def scale(request: HttpRequest, pk: int) -> HttpResponse:
    copies = request.POST.get("copies", "")
    size = request.POST.get("accelerators_per_copy", "") or None
    moves = request.POST.get("allow_moves", "")
    return operate(request, pk, lambda d: actions.scale(request.user, d, copies, size, moves))


@require_POST
def set_autoscaling(request: HttpRequest, pk: int) -> HttpResponse:
    """The Autoscaling panel's form: bounds and target, or off (back to a fixed number)."""
    get_deployment(request.user, pk, NEEDS_OPERATE)  # the role first, then what was typed
    if "off" in request.POST:
        return operate(request, pk, lambda d: actions.set_autoscaling(request.user, d, None))
    form = AutoscalingForm(request.POST)
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        messages.error(request, f"Not done: {field.replace('_', ' ')}: {errors[0]}")
        return redirect("deployment_detail", pk=pk)
    policy = {name: value for name, value in form.cleaned_data.items() if value is not None}
    return operate(request, pk, lambda d: actions.set_autoscaling(request.user, d, policy))


def confirm(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Stop and Delete ask first, on a page of their own (JavaScript or not)."""
    deployment = get_deployment(request.user, pk, NEEDS_OPERATE)
    copies = deployment.copies.exclude(state=CopyState.STOPPED).count()
    context = {"deployment": deployment, "action": action, "copies": copies}
    return render(request, "deployments/confirm.html", context)


@require_http_methods(["GET", "POST"])
def stop(request: HttpRequest, pk: int) -> HttpResponse:
    if request.method == "GET":
        return confirm(request, pk, "stop")
    return operate(request, pk, lambda d: actions.stop(request.user, d))


@require_POST
def start(request: HttpRequest, pk: int) -> HttpResponse:
    return operate(request, pk, lambda d: actions.start(request.user, d))


@require_http_methods(["GET", "POST"])
def delete(request: HttpRequest, pk: int) -> HttpResponse:
    if request.method == "GET":
        return confirm(request, pk, "delete")
    return operate(request, pk, lambda d: actions.delete(request.user, d))


@require_POST
def check_now(request: HttpRequest, pk: int) -> HttpResponse:
    return operate(request, pk, lambda d: actions.check_now(request.user, d))


@require_POST
def sync_files(request: HttpRequest, pk: int) -> HttpResponse:
    return operate(request, pk, lambda d: actions.sync_files(request.user, d))


@require_POST
def offer_in_chat(request: HttpRequest, pk: int) -> HttpResponse:
    name = request.POST.get("chat_name", "")
    return operate(request, pk, lambda d: actions.offer_in_chat(request.user, d, name))


@require_POST
def reply_wait(request: HttpRequest, pk: int) -> HttpResponse:
    seconds = request.POST.get("reply_wait_s", "")
    return operate(request, pk, lambda d: actions.set_reply_wait(request.user, d, seconds))


@require_POST
def routing(request: HttpRequest, pk: int) -> HttpResponse:
    policy = request.POST.get("routing", "")
    return operate(request, pk, lambda d: actions.set_routing(request.user, d, policy))


@require_POST
def queue(request: HttpRequest, pk: int) -> HttpResponse:
    waiting, wait = request.POST.get("max_waiting", ""), request.POST.get("queue_wait_s", "")
    return operate(request, pk, lambda d: actions.set_queue(request.user, d, waiting, wait))


# How the confirmation page names each bulk action, and what it then does to each deployment.
BULK_WORDS = {
    "stop": ("Stop", "Their copies stop and give back their room; their settings are kept."),
    "start": ("Start", "Each stopped one is placed and loaded again."),
    "check_now": ("Check now", "Each is looked at at once; a failed one starts over."),
    "delete": ("Delete", "Their copies stop, then they are removed; their events stay."),
}


@require_POST
def bulk(request: HttpRequest) -> HttpResponse:
    """The list's bulk bar: a confirmation page first, then one action on each selected one."""
    form = BulkForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, f"Not done: {' '.join(errors)}")
        return redirect("deployment_list")
    action, selected = form.cleaned_data["action"], form.cleaned_data["selected"]
    chosen = [get_deployment(request.user, pk, NEEDS_OPERATE) for pk in selected]
    if not form.cleaned_data["confirmed"]:
        verb, effect = BULK_WORDS[action]
        context = {"action": action, "verb": verb, "effect": effect, "chosen": chosen}
        return render(request, "deployments/confirm_bulk.html", context)
    for outcome in actions.bulk(request.user, action, chosen):
        if outcome.done:
            messages.success(request, f"{outcome.name}: {outcome.words}")
        else:
            messages.error(request, f"{outcome.name}: not done: {outcome.words}.")
    return redirect("deployment_list")

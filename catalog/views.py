"""Catalog pages: the marketplace, a model's page, adding models, and the files on this server.

Every logged-in user browses; operators (of any team) add models by repository id and
download them; platform admins also add models from a path and delete files.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from catalog import adding, downloads, trust
from catalog.forms import (
    AddFromHubForm,
    AddFromPathForm,
    DownloadForm,
    MarketplaceFilter,
    ServerModelFilter,
)
from catalog.hub import Access, HubProblem
from catalog.models import Model, ServerModel, ServerModelState
from console.access import (
    can_operate_somewhere,
    is_platform_admin,
    require_operator_somewhere,
    require_platform_admin,
)
from console.lists import headings, pager
from deployments import actions, guidance

# The headings of the list's table (templates/partials/list_table.html).
# On this server's headings, each with the order it sorts by (ServerModelFilter.orders), or none.
SERVER_MODEL_COLUMNS = (
    ("Model", "model"),
    ("Variant", ""),
    ("Revision", ""),
    ("Size on disk", "size"),
    ("Files", ""),
    ("State", "state"),
    ("", ""),
)


def ready_model_ids() -> set[int]:
    ready = ServerModel.objects.filter(state=ServerModelState.READY)
    return set(ready.values_list("variant__model_id", flat=True))


def marketplace(request: HttpRequest) -> HttpResponse:
    filters = MarketplaceFilter(request.GET or None)
    shown, cursor_error = filters.page_leniently(
        filters.apply(Model.objects.prefetch_related("variants"))
    )
    context = {
        "models": shown.rows,
        **pager(shown, cursor_error, request.GET),
        "filters": filters,
        "filtering": bool(filters.valid()),
        "query": request.GET.get("q", ""),
        "on_server": ready_model_ids(),
        "operates_somewhere": can_operate_somewhere(request.user),
    }
    return render(request, "catalog/marketplace.html", context)


def model_detail(request: HttpRequest, pk: int) -> HttpResponse:
    model = get_object_or_404(Model.objects.prefetch_related("variants__server_copies"), pk=pk)
    context: dict[str, Any] = {
        "model": model,
        "guidance": guidance.for_model(model),
        "fit_context": min(guidance.FIT_CONTEXT, model.max_context),
    }
    if can_operate_somewhere(request.user):
        context["download_form"] = DownloadForm(user=request.user, model=model)
    return render(request, "catalog/model_detail.html", context)


def add_model(request: HttpRequest) -> HttpResponse:
    """Add a model by Hugging Face repository id (operators)."""
    require_operator_somewhere(request.user)
    form = AddFromHubForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            model = adding.add_from_hub(
                data["repo_id"], data["revision"], Access.of_team(data["team"]), request.user
            )
        except (HubProblem, adding.AddRefused) as problem:
            form.add_error(None, str(problem))
        else:
            count = model.variants.count()
            messages.success(request, f"Added {model.repo_id} with {count} variant(s).")
            return redirect("model_detail", pk=model.pk)
    path_form = AddFromPathForm() if is_platform_admin(request.user) else None
    context = {"form": form, "path_form": path_form}
    return render(request, "catalog/add_model.html", context, status=400 if form.errors else 200)


def add_model_from_path(request: HttpRequest) -> HttpResponse:
    """Add a model whose files are already on this server (platform admins)."""
    require_platform_admin(request.user)
    form = AddFromPathForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            model = adding.add_from_path(data["path"], data["repo_id"], request.user)
        except adding.AddRefused as problem:
            form.add_error("path", str(problem))
        else:
            messages.success(request, f"Added {model.repo_id}; its files stay at {data['path']}.")
            return redirect("model_detail", pk=model.pk)
    context = {"form": AddFromHubForm(user=request.user), "path_form": form}
    return render(request, "catalog/add_model.html", context, status=400 if form.errors else 200)


@require_POST
def download(request: HttpRequest, pk: int) -> HttpResponse:
    """Ask for a variant's files on this server (operators)."""
    require_operator_somewhere(request.user)
    model = get_object_or_404(Model, pk=pk)
    form = DownloadForm(request.POST, user=request.user, model=model)
    if not form.is_valid():
        for field, errors in form.errors.items():
            messages.error(request, f"Not downloaded: {field}: {' '.join(errors)}")
        return redirect("model_detail", pk=pk)
    data = form.cleaned_data
    try:
        row = downloads.request_download(
            data["variant"], data["revision"], data["team"], request.user
        )
    except downloads.DownloadRefused as refused:
        messages.error(request, f"Not downloaded: {refused}")
        return redirect("model_detail", pk=pk)
    messages.success(request, f"{row.variant}: {row.get_state_display().lower()}.")
    return redirect("server_models")


@require_POST
def ask_code_trust(request: HttpRequest, pk: int) -> HttpResponse:
    """An operator asks a platform admin to trust a model's own code (they cannot switch it on)."""
    require_operator_somewhere(request.user)
    model = get_object_or_404(Model, pk=pk)
    revision = request.POST.get("code_revision", "")[:100]
    row = trust.ask(model, revision, request.user)
    if row.trusted:
        messages.info(request, f"{model.repo_id}'s own code is trusted already.")
    else:
        messages.success(
            request,
            f"Asked: a platform admin decides whether {model.repo_id}'s own code may run "
            "(Django admin → Code trusts).",
        )
    target = request.POST.get("code_trust_next", "")
    if not url_has_allowed_host_and_scheme(target, {request.get_host()}):
        target = reverse("model_detail", args=[pk])
    return redirect(target)


def server_models(request: HttpRequest) -> HttpResponse:
    kept = ServerModel.objects.select_related("variant__model", "team")
    filters = ServerModelFilter(request.GET)
    shown, cursor_error = filters.page_leniently(filters.apply(kept))
    context = {
        "server_models": shown.rows,
        "columns": headings(SERVER_MODEL_COLUMNS, filters, request.GET),
        **pager(shown, cursor_error, request.GET),
        "filtering": bool(set(filters.valid()) - {"sort"}),
        "params": request.GET,
        "states": ServerModelState.choices,
        **row_permissions(request),
    }
    return render(request, "catalog/server_models.html", context)


def row_permissions(request: HttpRequest) -> dict[str, bool]:
    return permissions_of(request.user)


def permissions_of(user: Any) -> dict[str, bool]:
    """Which buttons a row of On this server shows the user (pages and live updates alike);
    where the files lie on this server is for platform admins only."""
    admin = is_platform_admin(user)
    return {
        "operates_somewhere": can_operate_somewhere(user),
        "can_delete": admin,
        "sees_paths": admin,
    }


def server_model_row(request: HttpRequest, pk: int) -> HttpResponse:
    """One row of On this server: what a page polls while its live socket is down."""
    row = get_object_or_404(ServerModel.objects.select_related("variant__model", "team"), pk=pk)
    context = {"row": row, **row_permissions(request)}
    return render(request, "catalog/_server_model_row.html", context)


@require_POST
def try_again(request: HttpRequest, pk: int) -> HttpResponse:
    require_operator_somewhere(request.user)
    row = get_object_or_404(ServerModel.objects.select_related("variant"), pk=pk)
    try:
        downloads.try_again(row, request.user)
    except downloads.DownloadRefused as refused:
        messages.error(request, f"Not done: {refused}")
    else:
        messages.success(request, f"Downloading {row.variant} again.")
    return redirect("server_models")


@require_POST
def delete_files(request: HttpRequest, pk: int) -> HttpResponse:
    require_platform_admin(request.user)
    row = get_object_or_404(ServerModel.objects.select_related("variant__model"), pk=pk)
    try:
        done = actions.delete_server_files(request.user, row).words
    except downloads.DownloadRefused as refused:
        messages.error(request, f"Not deleted: {refused}")
    else:
        messages.success(request, done)
    return redirect("server_models")

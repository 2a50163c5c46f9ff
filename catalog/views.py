"""Catalog pages: the marketplace, a model's page and the models kept on this server."""

from __future__ import annotations

from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from catalog.models import Model, ServerModel, ServerModelState


def marketplace(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    models = Model.objects.prefetch_related("variants")
    if query:
        models = models.filter(
            Q(name__icontains=query) | Q(repo_id__icontains=query) | Q(family__icontains=query)
        )
    on_server = set(
        ServerModel.objects.filter(state=ServerModelState.READY).values_list(
            "variant__model_id", flat=True
        )
    )
    return render(
        request,
        "catalog/marketplace.html",
        {"models": models, "query": query, "on_server": on_server},
    )


def model_detail(request: HttpRequest, pk: int) -> HttpResponse:
    model = get_object_or_404(Model.objects.prefetch_related("variants__server_copies"), pk=pk)
    return render(request, "catalog/model_detail.html", {"model": model})


def server_models(request: HttpRequest) -> HttpResponse:
    kept = ServerModel.objects.select_related("variant__model")
    return render(request, "catalog/server_models.html", {"server_models": kept})

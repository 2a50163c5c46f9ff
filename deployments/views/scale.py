"""The scale dialog: copies and size with a live fit check (the words: deployments/fit_words.py)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from console.access import NEEDS_OPERATE
from deployments import actions, repacking
from deployments.access import get_deployment
from deployments.fit_words import moves_for_scale, scale_words, size_text
from deployments.models import Deployment


def scale_values(deployment: Deployment, query: Any) -> tuple[int, Decimal, str]:
    """The copies and size asked for in the query string (the deployment's own by default)."""
    try:
        copies = actions.parse_copies(query.get("copies") or str(deployment.copies_wanted))
        size = actions.parse_size(
            query.get("accelerators_per_copy") or deployment.accelerators_per_copy
        )
    except actions.ActionRefused as refused:
        return deployment.copies_wanted, deployment.accelerators_per_copy, refused.message
    return copies, size, ""


def dialog_context(deployment: Deployment, query: Any, user: Any) -> dict[str, Any]:
    copies, size, problem = scale_values(deployment, query)
    scale = scale_words(deployment, copies, size)
    return {
        "moves": moves_offer(deployment, copies, size, user) if scale.cannot_start else "",
        "allow_moves": query.get("allow_moves") == "on",
        "deployment": deployment,
        "copies": copies,
        "size": size_text(size),
        "size_editable": deployment.accelerators_per_copy <= 1,
        "scale": scale,
        "problem": problem,
    }


@never_cache
def scale_dialog(request: HttpRequest, pk: int) -> HttpResponse:
    """The Scale dialog with a live fit check; it posts to deployment_scale."""
    deployment = get_deployment(request.user, pk, NEEDS_OPERATE)
    context = dialog_context(deployment, request.GET, request.user)
    if getattr(request, "htmx", False):
        return render(request, "deployments/_scale_dialog.html", context)
    return render(request, "deployments/editor/scale_page.html", context)


def scale_fit(request: HttpRequest, pk: int) -> HttpResponse:
    """The dialog's fit check for the values typed so far (htmx)."""
    deployment = get_deployment(request.user, pk, NEEDS_OPERATE)
    return render(
        request,
        "deployments/editor/_scale_fit.html",
        dialog_context(deployment, request.GET, request.user),
    )


def moves_offer(deployment: Deployment, copies: int, size: Decimal, user: Any) -> str:
    """The moves of other copies after which the copies asked for fit, in words, to accept
    with the dialog's box ("" when none would)."""
    return repacking.moves_offered(user, moves_for_scale(deployment, copies, size))

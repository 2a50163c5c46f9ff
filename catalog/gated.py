"""A gated model is hosted by a team only when that team's own Hugging Face token may read it.

The files on this server may have come with another team's token; hosting them would hand a
model to a team its publisher never let in. So before a team hosts a gated model, Berth asks the
hub with the team's token (reading the model's config.json, which a gated repository guards),
and remembers a yes per team and model.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from catalog import hub
from catalog.models import GatedAccess, Model

REFUSED_KINDS = {hub.HubProblem.GATED, hub.HubProblem.TOKEN_REFUSED}


class GatedRefused(Exception):
    """The team may not host the gated model (or it could not be checked); words say why."""


def require_access(team: Any, model: Model) -> None:
    """Return when the team may host `model`; raise GatedRefused saying what to do if not."""
    if not model.gated or GatedAccess.objects.filter(team=team, model=model).exists():
        return
    access = hub.Access.of_team(team)
    try:
        hub.read_json(model.repo_id, "main", "config.json", access)
    except hub.HubProblem as problem:
        if problem.kind in REFUSED_KINDS:
            raise GatedRefused(problem.message) from None
        raise GatedRefused(
            f"{model.repo_id} is gated, and Berth could not ask Hugging Face whether team "
            f"{team.name} may use it: {problem.message}"
        ) from None
    GatedAccess.objects.update_or_create(
        team=team, model=model, defaults={"checked_at": timezone.now()}
    )

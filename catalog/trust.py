"""Trusting a model's own code: asked for by an operator, decided by a platform admin.

vLLM runs Python from a model's repository only with --trust-remote-code. That code runs with
everything the engine can reach, so it is not an engine setting an operator switches on: a
platform admin trusts a model (per revision) in the Django admin, and every copy of that model
and revision then starts with it. An operator can ask; the editor says where things stand.
"""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from catalog.models import CodeTrust, Model
from console import audit
from placement.words import day, when

log = logging.getLogger(__name__)


def decision(model: Model, revision: str) -> CodeTrust | None:
    return CodeTrust.objects.filter(model=model, revision=revision).first()


def is_trusted(model: Model, revision: str) -> bool:
    return CodeTrust.objects.filter(
        model=model, revision=revision, trusted_at__isnull=False
    ).exists()


def kept_per_team(model: Model, revision: str) -> bool:
    """Gated weights (each team has its own access) and models that run their own code (which
    could rewrite what it reads) are cached per team on a cluster, never in the shared cache."""
    return model.gated or is_trusted(model, revision)


def ask(model: Model, revision: str, actor: Any) -> CodeTrust:
    """Record an operator's request (once; asking again changes nothing)."""
    row, _ = CodeTrust.objects.get_or_create(model=model, revision=revision)
    if not row.trusted and row.asked_at is None:
        row.asked_by, row.asked_at = actor, timezone.now()
        row.save(update_fields=["asked_by", "asked_at"])
        audit.record(actor, audit.CODE_TRUST_ASKED, str(row))
        log.info("%s asked to trust the code of %s", actor, row)
    return row


def trust(model: Model, revision: str, admin: Any, note: str = "") -> CodeTrust:
    """A platform admin's decision: copies of this model and revision run its own code."""
    if not (admin.is_active and admin.is_staff):
        raise PermissionError("Only platform admins may trust a model's code.")
    row, _ = CodeTrust.objects.get_or_create(model=model, revision=revision)
    row.trusted_by, row.trusted_at = admin, timezone.now()
    row.note = note or row.note
    row.save(update_fields=["trusted_by", "trusted_at", "note"])
    log.info("%s trusted the code of %s", admin, row)
    audit.record(admin, audit.CODE_TRUSTED, str(row), note)
    return row


def withdraw(row: CodeTrust, admin: Any) -> None:
    """Trust withdrawn: copies started from now on run without the model's code."""
    row.trusted_by, row.trusted_at = None, None
    row.note = f"Trust withdrawn by {admin} on {when(timezone.now())}."
    row.save(update_fields=["trusted_by", "trusted_at", "note"])
    log.info("%s withdrew trust in the code of %s", admin, row)
    audit.record(admin, audit.CODE_TRUST_WITHDRAWN, str(row))


def status_words(model: Model, revision: str) -> str:
    """Where the model's code stands, for the editor and the preview."""
    row = decision(model, revision)
    which = f"revision {revision}" if revision else "the default revision"
    if row is not None and row.trusted:
        since = day(row.trusted_at) if row.trusted_at else ""
        return (
            f"{model.repo_id}'s own code ({which}) is trusted by {row.trusted_by or 'an admin'} "
            f"since {since}: its copies run it."
        )
    if row is not None and row.asked_at is not None:
        return (
            f"{row.asked_by or 'Someone'} asked a platform admin on {day(row.asked_at)} to "
            f"trust {model.repo_id}'s own code ({which}); until then its copies run without it."
        )
    return (
        f"{model.repo_id}'s own code ({which}) is not trusted: its copies run without it. "
        "A platform admin decides; you can ask."
    )

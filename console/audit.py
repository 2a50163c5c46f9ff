"""The audit trail of actions that are not a deployment's own (those are its Events).

One call per action function: who (the signed-in user, or a command line's name for it), what
(a dotted action name), on what (in words), and the words of the outcome. Never a secret.
"""

from __future__ import annotations

from typing import Any

from console.models import AuditEntry

# The action names, one per kind of change (the audit page filters by them).
API_KEY_ISSUED = "api_key.issued"
API_KEY_REVOKED = "api_key.revoked"
DOWNLOAD_REQUESTED = "download.requested"
DOWNLOAD_RETRIED = "download.retried"
FILES_DELETED = "files.deleted"
MODEL_ADDED = "model.added"
CODE_TRUSTED = "code.trusted"
CODE_TRUST_WITHDRAWN = "code.trust_withdrawn"
CODE_TRUST_ASKED = "code.trust_asked"
CLUSTER_CHECKED = "cluster.connection_tested"
CLUSTER_REFRESHED = "cluster.refreshed"
PASSWORD_CHANGED = "account.password_changed"
TEAM_MEMBER_ADDED = "team.member_added"
TEAM_ROLE_CHANGED = "team.role_changed"
TEAM_MEMBER_REMOVED = "team.member_removed"
TEAM_HF_TOKEN_SET = "team.hf_token_set"
TEAM_HF_TOKEN_CLEARED = "team.hf_token_cleared"
WEBHOOK_ADDED = "webhook.added"
WEBHOOK_ENABLED = "webhook.enabled"
WEBHOOK_DISABLED = "webhook.disabled"
WEBHOOK_DELETED = "webhook.deleted"
WEBHOOK_TESTED = "webhook.tested"
EMAIL_ADDED = "email.added"
EMAIL_ENABLED = "email.enabled"
EMAIL_DISABLED = "email.disabled"
EMAIL_DELETED = "email.deleted"
EMAIL_TESTED = "email.tested"
# Every one of them, in this order on the Events page's kind filter.
ACTIONS = (
    API_KEY_ISSUED,
    API_KEY_REVOKED,
    DOWNLOAD_REQUESTED,
    DOWNLOAD_RETRIED,
    FILES_DELETED,
    MODEL_ADDED,
    CODE_TRUSTED,
    CODE_TRUST_WITHDRAWN,
    CODE_TRUST_ASKED,
    CLUSTER_CHECKED,
    CLUSTER_REFRESHED,
    PASSWORD_CHANGED,
    TEAM_MEMBER_ADDED,
    TEAM_ROLE_CHANGED,
    TEAM_MEMBER_REMOVED,
    TEAM_HF_TOKEN_SET,
    TEAM_HF_TOKEN_CLEARED,
    WEBHOOK_ADDED,
    WEBHOOK_ENABLED,
    WEBHOOK_DISABLED,
    WEBHOOK_DELETED,
    WEBHOOK_TESTED,
    EMAIL_ADDED,
    EMAIL_ENABLED,
    EMAIL_DISABLED,
    EMAIL_DELETED,
    EMAIL_TESTED,
)


def actor_name(actor: Any) -> str:
    if actor is None or not getattr(actor, "is_authenticated", False):
        return ""
    return str(actor.get_username())


def record(
    actor: Any, action: str, target: str, message: str = "", team: Any = None, by: str = ""
) -> AuditEntry:
    """Write one audit row. `by` names a non-user actor (e.g. "manage.py createapikey")."""
    signed_in = actor if getattr(actor, "is_authenticated", False) else None
    return AuditEntry.objects.create(
        actor=signed_in,
        actor_name=actor_name(actor) or by,
        team=team,
        action=action,
        target=target[:300],
        message=message,
    )

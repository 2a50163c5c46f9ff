"""A notice as an e-mail: the same facts a webhook's payload carries, in words a person reads
on a phone at night (what happened, to which deployment, what it said, where to look)."""

from __future__ import annotations

from email.message import EmailMessage
from email.utils import make_msgid
from typing import Any

from django.conf import settings

HAPPENED = {
    "failed": "failed",
    "degraded": "is degraded",
    "recovered": "recovered and serves again",
}


def subject_of(payload: dict[str, Any]) -> str:
    deployment = payload.get("deployment")
    if deployment is None:
        return f"[Berth] A test notice for team {payload['team']}"
    happened = HAPPENED.get(payload["event"], payload["event"])
    return f"[Berth] {deployment['name']} of team {deployment['team']} {happened}"


def body_of(payload: dict[str, Any]) -> str:
    deployment = payload.get("deployment")
    if deployment is None:
        return (
            f"This is a test notice for team {payload['team']}, sent by one of its admins at "
            f"{payload['at']}. Notices about the team's deployments will come to this address.\n"
        )
    lines = [
        f"Deployment {deployment['name']} of team {deployment['team']} "
        f"{HAPPENED.get(payload['event'], payload['event'])}.",
        "",
        f"State: {deployment['state']} (was {deployment['previous_state']})",
    ]
    if deployment.get("message"):
        lines.append(f"What Berth saw: {deployment['message']}")
    if deployment.get("last_error_code"):
        lines.append(f"Error code: {deployment['last_error_code']}")
    lines.append(f"At: {payload['at']} (UTC)")
    lines += ["", f"Its page: {payload['url']}", ""]
    return "\n".join(lines)


def message_of(payload: dict[str, Any], to: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = settings.SMTP_FROM
    message["To"] = to
    message["Subject"] = subject_of(payload)
    message["Message-ID"] = make_msgid(domain=settings.SMTP_FROM.rpartition("@")[2])
    message["X-Berth-Event"] = payload["event"]
    message.set_content(body_of(payload))
    return message

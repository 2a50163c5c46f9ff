"""Upgrading to the reviewed allow-list and admin-trusted code (DESIGN §8b).

- A deployment that ran its model's own code (engine setting trust_remote_code) keeps doing so:
  the model (and revision) is marked trusted by the user who had created the deployment, recorded
  as such, and the setting goes (it is no longer an operator's).
- A deployment whose stored settings the allow-list now refuses gets the SettingsRefused notice
  and an Event with the refusal, so the operator sees why before the next start refuses them.
"""

from django.db import migrations
from django.utils import timezone

from deployments.engine.settings import EngineSettingsError, validate_settings

UPGRADE_NOTE = (
    "Trusted on upgrade: {user} had hosted {deployment} with the model's own code on, before "
    "trusting it became a platform admin's decision."
)


def trust_what_ran(apps, deployment) -> None:
    CodeTrust = apps.get_model("catalog", "CodeTrust")
    row, _ = CodeTrust.objects.get_or_create(model_id=deployment.model_id, revision=deployment.revision)
    if row.trusted_at is None:
        row.trusted_by_id = deployment.created_by_id
        row.trusted_at = timezone.now()
        who = deployment.created_by.username if deployment.created_by_id else "someone"
        row.note = UPGRADE_NOTE.format(user=who, deployment=deployment.name)
        row.save()


def mark_refused(apps, deployment) -> None:
    Event = apps.get_model("deployments", "Event")
    try:
        validate_settings(deployment.engine_settings, deployment.cluster.engine_version)
    except EngineSettingsError as refused:
        deployment.notices = sorted({*deployment.notices, "SettingsRefused"})
        Event.objects.create(
            deployment=deployment,
            deployment_name=deployment.name,
            kind="system",
            message=f"Engine settings Berth now refuses: {refused}. The next start refuses "
            "them; change them in Engine settings.",
        )


def upgrade(apps, schema_editor) -> None:
    Deployment = apps.get_model("deployments", "Deployment")
    for deployment in Deployment.objects.select_related("cluster", "created_by"):
        settings = dict(deployment.engine_settings or {})
        if settings.pop("trust_remote_code", False):
            trust_what_ran(apps, deployment)
        deployment.engine_settings = settings
        mark_refused(apps, deployment)
        deployment.save(update_fields=["engine_settings", "notices"])


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0006_scrub_engine_keys_from_lines"),
        ("catalog", "0005_code_trust"),
    ]

    operations = [migrations.RunPython(upgrade, migrations.RunPython.noop)]

"""Events know their team, so that a deleted deployment's events stay visible to its team; the
events written before are given their deployment's team (a deleted deployment's old events have
no deployment left to ask, and stay for platform admins)."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def fill_teams(apps, schema_editor) -> None:
    Event = apps.get_model("deployments", "Event")
    Deployment = apps.get_model("deployments", "Deployment")
    team_of_deployment = Deployment.objects.filter(pk=OuterRef("deployment_id")).values("team_id")
    Event.objects.filter(team__isnull=True, deployment__isnull=False).update(
        team_id=Subquery(team_of_deployment[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0004_api_key_scope_and_expiry"),
        ("deployments", "0009_move_machine_files"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="team",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="events",
                to="console.team",
            ),
        ),
        # Backwards the column goes away with its values: nothing to undo first.
        migrations.RunPython(fill_teams, migrations.RunPython.noop),
    ]

"""Each deployment made before revisions gets its first one: what it is asked to be now (the
spec as deployments/revisions.py keeps it at this migration's time)."""

from decimal import Decimal

from django.db import migrations


def first_revisions(apps, schema_editor):
    Deployment = apps.get_model("deployments", "Deployment")
    Revision = apps.get_model("deployments", "Revision")
    for deployment in Deployment.objects.select_related("variant").filter(revisions=None):
        Revision.objects.create(
            deployment=deployment,
            number=1,
            generation=deployment.generation,
            why="As it was when revisions began",
            actor_name="system",
            spec={
                "variant": deployment.variant.name,
                "revision": deployment.revision,
                "accelerators_per_copy": format(
                    Decimal(deployment.accelerators_per_copy).normalize(), "f"
                ),
                "copies": None if deployment.autoscaling else deployment.copies_wanted,
                "autoscaling": deployment.autoscaling,
                "engine_settings": deployment.engine_settings or {},
                "chat_name": deployment.chat_name,
                "reply_wait_s": deployment.reply_wait_s,
                "routing": deployment.routing,
                "max_waiting": deployment.max_waiting,
                "queue_wait_s": deployment.queue_wait_s,
                "movable": deployment.movable,
            },
        )


class Migration(migrations.Migration):
    dependencies = [("deployments", "0020_revisions")]

    operations = [migrations.RunPython(first_revisions, migrations.RunPython.noop)]

# MachineFiles comes from catalog (catalog 0007 let it go from catalog's state only): the model
# enters deployments' state on the existing table, which is then renamed; every row stays.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0007_move_machine_files"),
        ("clusters", "0003_cluster_discovery_message"),
        ("deployments", "0008_copy_socket_path"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="MachineFiles",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "revision",
                            models.CharField(blank=True, help_text="commit of the files", max_length=64),
                        ),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("queued", "Queued"),
                                    ("copying", "Copying"),
                                    ("present", "On the machine"),
                                    ("missing", "Missing"),
                                    ("failed", "Failed"),
                                ],
                                default="queued",
                                max_length=16,
                            ),
                        ),
                        ("size_bytes", models.PositiveBigIntegerField(default=0)),
                        ("progress_bytes", models.PositiveBigIntegerField(default=0)),
                        ("message", models.TextField(blank=True)),
                        (
                            "checked_at",
                            models.DateTimeField(
                                blank=True, help_text="when last found or copied", null=True
                            ),
                        ),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "machine",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="model_files",
                                to="clusters.machine",
                            ),
                        ),
                        (
                            "variant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="machine_copies",
                                to="catalog.variant",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name_plural": "machine files",
                        "ordering": ["machine__name"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("machine", "variant", "revision"),
                                name="one_files_row_per_machine",
                            )
                        ],
                        "db_table": "catalog_machinefiles",
                    },
                ),
            ],
            database_operations=[],
        ),
        # The table takes deployments' name (state and database alike).
        migrations.AlterModelTable(name="machinefiles", table=None),
    ]

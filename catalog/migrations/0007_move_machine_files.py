# MachineFiles moves to deployments, where its behaviour is (deployments/machine_files.py): the
# model leaves catalog's state only; its table and rows stay, and deployments 0009 takes them.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0006_gated_access"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="MachineFiles")],
            database_operations=[],
        ),
    ]

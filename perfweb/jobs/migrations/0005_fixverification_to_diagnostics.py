"""FixVerification now belongs to the diagnostics app (diagnostics 0003 adds it to that app's
state): the model leaves this app's state, its table (`jobs_fixverification`) and rows stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0004_arm_metrics_agreement_tolerance"),
        ("diagnostics", "0003_fixverification_from_jobs"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="FixVerification")],
            database_operations=[],
        ),
    ]

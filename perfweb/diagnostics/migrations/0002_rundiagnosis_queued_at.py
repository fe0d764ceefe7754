"""RunDiagnosis.queued_at: the run's one pending diagnosis message (issue 27: coalesced)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("diagnostics", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="rundiagnosis",
            name="queued_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
